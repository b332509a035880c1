package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
)

// htmlFigure is a rendered figure.
type htmlFigure struct {
	Name, Title, Caption string
	Img                  template.HTML // <img> with a data:image/png;base64 source (base64 needs no escaping)
}

type htmlSection struct {
	ID, Title, Intro string
	PDF              string
	Notes            []string
	Tables           []Table
	Figures          []htmlFigure
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>KINTSUGI QC report: {{.Project}}</title>
<style>
body { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
header { background: #23395b; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header p { margin: 2px 0; font-size: 13px; opacity: .9; }
nav { padding: 8px 32px; background: #e8edf4; font-size: 14px; }
nav a { margin-right: 18px; color: #23395b; }
main { padding: 8px 32px 40px 32px; max-width: 1500px; }
h2 { border-bottom: 2px solid #23395b; padding-bottom: 4px; margin-top: 36px; }
h3 { font-size: 16px; margin: 22px 0 6px 0; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 16px 0; background: #fff; }
caption { text-align: left; font-size: 13px; color: #333; padding: 4px 0; max-width: 1100px; }
th, td { border: 1px solid #c8ced6; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
.note { background: #fff6d6; border-left: 4px solid #e0b000; padding: 6px 10px; margin: 6px 0; font-size: 13px; max-width: 1100px; }
figure { margin: 10px 0 26px 0; background: #fff; border: 1px solid #dde2e8; padding: 8px; display: inline-block; max-width: calc(100% - 20px); }
figure img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12.5px; color: #333; margin-top: 6px; max-width: 1000px; }
.pdf { font-size: 13px; color: #555; }
</style>
</head>
<body>
<header>
<h1>KINTSUGI quality-control report</h1>
<p>Project: {{.Project}}</p>
<p>{{len .Cycles}} cycles, {{len .Channels}} channels; written {{.Generated}} by kintsugi-qc report</p>
</header>
<nav><a href="#summary">Summary</a>{{range .Sections}}<a href="#{{.ID}}">{{.Title}}</a>{{end}}</nav>
<main>
<h2 id="summary">Summary</h2>
{{range .Notes}}<div class="note">{{.}}</div>{{end}}
{{range .Summary}}{{template "table" .}}{{end}}
{{range .Warnings}}{{template "table" .}}{{else}}<p>No warnings or errors in the stage logs.</p>{{end}}
{{range .Sections}}
<h2 id="{{.ID}}">{{.Title}}</h2>
<p>{{.Intro}} <span class="pdf">PDF of this section's figures: qc_plots/{{.PDF}}</span></p>
{{range .Notes}}<div class="note">{{.}}</div>{{end}}
{{range .Tables}}{{template "table" .}}{{end}}
{{range .Figures}}
<h3 id="{{.Name}}">{{.Title}}</h3>
<figure>{{.Img}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}
{{end}}
</main>
</body>
</html>
{{define "table"}}<table><caption>{{.Caption}}</caption><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
`))

// HTML renders the report page with every figure embedded as a PNG data URI.
func (r *Report) HTML() ([]byte, error) {
	var secs []htmlSection
	for _, s := range r.Sections {
		hs := htmlSection{ID: s.ID, Title: s.Title, Intro: s.Intro, PDF: PDFNames[s.ID], Notes: s.Notes, Tables: s.Tables}
		for _, f := range s.Figures {
			hf, err := renderFigure(f)
			if err != nil {
				return nil, err
			}
			hs.Figures = append(hs.Figures, hf)
		}
		secs = append(secs, hs)
	}
	var b bytes.Buffer
	err := page.Execute(&b, map[string]any{
		"Project": r.Project, "Cycles": r.Cycles, "Channels": r.Channels, "Generated": r.Generated.Format("2006-01-02 15:04 UTC"),
		"Notes": r.Notes, "Summary": r.Summary, "Warnings": r.Warnings, "Sections": secs,
	})
	if err != nil {
		return nil, fmt.Errorf("report html: %w", err)
	}
	return b.Bytes(), nil
}

func renderFigure(f *plot.Figure) (htmlFigure, error) {
	b, mime, err := f.Raster()
	if err != nil {
		return htmlFigure{}, err
	}
	img := fmt.Sprintf(`<img src="data:%s;base64,%s" alt="%s" style="width: %dpx">`, mime,
		base64.StdEncoding.EncodeToString(b), template.HTMLEscapeString(f.Title), int(math.Round(float64(f.W)*96/72)))
	return htmlFigure{Name: f.Name, Title: f.Title, Caption: f.Caption, Img: template.HTML(img)}, nil
}
