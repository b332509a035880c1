package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
)

// A param is one kernel parameter: its C name, its C type as written
// (qualifiers removed) and the Go type its launcher takes.
type param struct {
	Name   string // C name
	CType  string // e.g. "const float*", "int", "i64"
	GoType string // cu.DevicePtr, int, uint32, int64, float32 or float64
}

// A kernel is one extern "C" __global__ function of a module.
type kernel struct {
	Name   string
	Module string // file name without .cu
	Line   int    // line of the declaration, or of the macro invocation that made it
	Doc    []string
	Params []param
	Decl   string // the declaration, on one line
}

// A family is a set of kernels made by one function-like macro whose kernel
// name is pasted from macro parameters (decon_conv_k##KX##_z##ZB): one
// launcher takes those parameters and picks the kernel by name at run time.
type family struct {
	Module  string
	Macro   string
	Line    int // line of the #define
	Doc     []string
	Format  string   // the kernel name as a fmt format: "decon_conv_k%d_z%d"
	Args    []string // the macro parameters in the name, in the order of Format
	Params  []param
	Decl    string
	Members []string
}

// A module is one kernels/<name>.cu file.
type module struct {
	Name     string
	Kernels  []kernel // in source order, macro expansions included
	Families []family
}

// cTypes maps the scalar C types a kernel may take to the Go types of the
// launcher; an int is passed as 64 bits (the kernel reads the low 32).
var cTypes = map[string]string{
	"int":          "int",
	"unsigned int": "uint32",
	"unsigned":     "uint32",
	"i64":          "int64",
	"long long":    "int64",
	"float":        "float32",
	"double":       "float64",
}

var (
	declRE  = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?([A-Za-z_][A-Za-z0-9_#]*)\s*\(([^()]*)\)`)
	defRE   = regexp.MustCompile(`^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)\(([^()]*)\)\s*(.*)$`)
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	intRE   = regexp.MustCompile(`^[0-9]+$`)
)

// A macro is a function-like #define.
type macro struct {
	name   string
	params []string
	body   string
	line   int
	doc    []string
}

// logicalLine is a source line after comment removal and joining of
// backslash continuations.
type logicalLine struct {
	text string
	line int // first physical line, 1-based
}

// parseDir parses every *.cu file of dir, sorted by name.
func parseDir(dir string) ([]module, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.cu"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .cu files in %s", dir)
	}
	sort.Strings(files)
	seen := map[string]string{}
	var mods []module
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m, err := parseModule(strings.TrimSuffix(filepath.Base(f), ".cu"), string(src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, k := range m.Kernels {
			if prev, dup := seen[k.Name]; dup {
				return nil, fmt.Errorf("%s: kernel %s already defined in %s.cu", f, k.Name, prev)
			}
			seen[k.Name] = m.Name
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// parseModule finds the kernels of one .cu source: extern "C" __global__
// declarations, and those made by invocations of function-like macros.
func parseModule(name, src string) (module, error) {
	phys := strings.Split(src, "\n")
	lines := logicalLines(stripComments(src))
	m := module{Name: name}
	macros := map[string]*macro{}
	for _, l := range lines {
		if mm := defRE.FindStringSubmatch(l.text); mm != nil {
			var ps []string
			for _, p := range strings.Split(mm[2], ",") {
				if p = strings.TrimSpace(p); p != "" {
					ps = append(ps, p)
				}
			}
			macros[mm[1]] = &macro{name: mm[1], params: ps, body: mm[3], line: l.line, doc: docAbove(phys, l.line)}
		}
	}
	// Only macros that (through others) make kernels are expanded.
	kernelMacro := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for n, mc := range macros {
			if kernelMacro[n] {
				continue
			}
			if strings.Contains(mc.body, "__global__") || invokesAny(mc.body, kernelMacro) {
				kernelMacro[n] = true
				changed = true
			}
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l.text), "#") {
			continue
		}
		if err := m.scan(l.text, l.line, phys, macros, kernelMacro, nil, 0); err != nil {
			return m, err
		}
	}
	return m, nil
}

// scan adds the kernels declared in text (one logical line or a macro
// expansion); from is the family macro being expanded, if any.
func (m *module) scan(text string, line int, phys []string, macros map[string]*macro, kernelMacro map[string]bool, from *macro, depth int) error {
	if depth > 16 {
		return fmt.Errorf("line %d: macro expansion too deep", line)
	}
	for _, d := range declRE.FindAllStringSubmatchIndex(text, -1) {
		kname := text[d[2]:d[3]]
		if strings.Contains(kname, "#") {
			return fmt.Errorf("line %d: kernel name %q not fully expanded", line, kname)
		}
		ps, err := parseParams(text[d[4]:d[5]])
		if err != nil {
			return fmt.Errorf("line %d: kernel %s: %w", line, kname, err)
		}
		k := kernel{Name: kname, Module: m.Name, Line: line, Params: ps, Decl: oneLine(text[d[0]:d[1]])}
		if from == nil {
			k.Doc = docAbove(phys, line)
		}
		m.Kernels = append(m.Kernels, k)
	}
	type call struct {
		pos, end int
		name     string
	}
	var calls []call
	for n := range kernelMacro {
		re := regexp.MustCompile(`\b` + n + `\s*\(`)
		for _, loc := range re.FindAllStringIndex(text, -1) {
			calls = append(calls, call{loc[0], loc[1], n})
		}
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].pos < calls[j].pos })
	for _, c := range calls {
		n := c.name
		args, err := callArgs(text[c.end:])
		if err != nil {
			return fmt.Errorf("line %d: %s: %w", line, n, err)
		}
		mc := macros[n]
		if len(args) != len(mc.params) {
			return fmt.Errorf("line %d: %s takes %d arguments, got %d", line, n, len(mc.params), len(args))
		}
		body := expand(mc, args)
		fam := from
		if strings.Contains(mc.body, "__global__") {
			fam = mc
		}
		before := len(m.Kernels)
		if err := m.scan(body, line, phys, macros, kernelMacro, fam, depth+1); err != nil {
			return err
		}
		if fam == mc {
			if _, err := m.addToFamily(mc, args, m.Kernels[before:]); err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
		}
	}
	return nil
}

// addToFamily records kernels made by one expansion of mc (with args) as
// members of the family of mc, when mc's kernel name is pasted from its
// parameters and their arguments are integers; it reports whether it did
// (else the kernels get launchers of their own).
func (m *module) addToFamily(mc *macro, args []string, made []kernel) (bool, error) {
	d := declRE.FindStringSubmatch(mc.body)
	if d == nil || len(made) != 1 {
		return false, nil
	}
	tmpl := d[1]
	type pasted struct {
		name string
		pos  int
	}
	var ps []pasted
	for i, p := range mc.params {
		pos := strings.Index(tmpl, "##"+p)
		if pos < 0 && strings.HasPrefix(tmpl, p+"##") {
			pos = 0
		}
		if pos < 0 {
			continue
		}
		if !intRE.MatchString(args[i]) {
			return false, nil
		}
		ps = append(ps, pasted{p, pos})
	}
	if len(ps) == 0 {
		return false, nil // a plain kernel written through a macro
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].pos < ps[j].pos })
	format := tmpl
	var names []string
	for _, p := range ps {
		format = strings.Replace(format, p.name, "%d", 1)
		names = append(names, p.name)
	}
	format = strings.ReplaceAll(format, "##", "")
	k := made[0]
	var f *family
	for i := range m.Families {
		if m.Families[i].Macro == mc.name {
			f = &m.Families[i]
		}
	}
	if f == nil {
		for _, a := range names {
			for _, p := range k.Params {
				if strings.EqualFold(p.Name, a) {
					return false, fmt.Errorf("macro %s: %s is both in the kernel name and a parameter", mc.name, a)
				}
			}
		}
		m.Families = append(m.Families, family{Module: m.Name, Macro: mc.name, Line: mc.line, Doc: mc.doc,
			Format: format, Args: names, Params: k.Params, Decl: oneLine(d[0])})
		f = &m.Families[len(m.Families)-1]
	} else if !reflect.DeepEqual(f.Params, k.Params) {
		return false, fmt.Errorf("macro %s: kernel %s's parameters differ from %s's", mc.name, k.Name, f.Members[0])
	}
	f.Members = append(f.Members, k.Name)
	return true, nil
}

// expand substitutes args for mc's parameters in its body and pastes ##.
func expand(mc *macro, args []string) string {
	idx := map[string]int{}
	for i, p := range mc.params {
		idx[p] = i
	}
	out := identRE.ReplaceAllStringFunc(mc.body, func(id string) string {
		if i, ok := idx[id]; ok {
			return args[i]
		}
		return id
	})
	return regexp.MustCompile(`\s*##\s*`).ReplaceAllString(out, "")
}

// callArgs splits the arguments of a macro call; s starts after "(".
func callArgs(s string) ([]string, error) {
	depth := 0
	var args []string
	start := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				if len(args) == 1 && args[0] == "" {
					args = nil
				}
				return args, nil
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, fmt.Errorf("unterminated macro call")
}

func invokesAny(body string, names map[string]bool) bool {
	for n := range names {
		if regexp.MustCompile(`\b` + n + `\s*\(`).MatchString(body) {
			return true
		}
	}
	return false
}

// parseParams parses a C parameter list into launcher parameters.
func parseParams(list string) ([]param, error) {
	var ps []param
	if strings.TrimSpace(list) == "" || strings.TrimSpace(list) == "void" {
		return nil, nil
	}
	for _, raw := range strings.Split(list, ",") {
		f := strings.Fields(strings.ReplaceAll(raw, "*", " * "))
		var kept []string
		for _, w := range f {
			switch w {
			case "const", "__restrict__", "__restrict", "volatile":
			default:
				kept = append(kept, w)
			}
		}
		if len(kept) < 2 {
			return nil, fmt.Errorf("parameter %q: want a type and a name", strings.TrimSpace(raw))
		}
		name := kept[len(kept)-1]
		if !identRE.MatchString(name) || identRE.FindString(name) != name {
			return nil, fmt.Errorf("parameter %q: bad name", strings.TrimSpace(raw))
		}
		typ := strings.Join(kept[:len(kept)-1], " ")
		var ct []string
		for _, w := range f[:len(f)-1] {
			if w != "__restrict__" && w != "__restrict" {
				ct = append(ct, w)
			}
		}
		p := param{Name: name, CType: strings.ReplaceAll(strings.Join(ct, " "), " *", "*")}
		if strings.HasSuffix(typ, "*") {
			p.GoType = "cu.DevicePtr"
		} else if g, ok := cTypes[typ]; ok {
			p.GoType = g
		} else {
			return nil, fmt.Errorf("parameter %s: C type %q has no Go launcher type (add it to cTypes)", name, typ)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// stripComments blanks // and /* */ comments and string contents are kept;
// newlines are kept so that line numbers stay.
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' && s[j] != '\n' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				j = len(s) - 1
			}
			b.WriteString(s[i : j+1])
			i = j
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				b.WriteByte('\n')
			}
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			end := len(s)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(strings.Repeat("\n", strings.Count(s[i:end], "\n")))
			b.WriteByte(' ')
			i = end - 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// logicalLines joins backslash continuations and, outside directives,
// lines up to the end of each top-level declaration, so that a kernel
// declaration spread over several lines is one logical line.
func logicalLines(s string) []logicalLine {
	phys := strings.Split(s, "\n")
	var out []logicalLine
	for i := 0; i < len(phys); i++ {
		start := i
		text := phys[i]
		if strings.HasPrefix(strings.TrimSpace(text), "#") {
			for strings.HasSuffix(text, "\\") && i+1 < len(phys) {
				i++
				text = strings.TrimSuffix(text, "\\") + " " + phys[i]
			}
			out = append(out, logicalLine{text: text, line: start + 1})
			continue
		}
		// A declaration's parameter list may go on over several lines.
		for strings.Count(text, "(") > strings.Count(text, ")") && i+1 < len(phys) {
			i++
			text += " " + phys[i]
		}
		out = append(out, logicalLine{text: text, line: start + 1})
	}
	return out
}

// docAbove returns the // comment lines directly above line (1-based).
func docAbove(phys []string, line int) []string {
	var doc []string
	for i := line - 2; i >= 0; i-- {
		t := strings.TrimSpace(phys[i])
		if !strings.HasPrefix(t, "//") {
			break
		}
		doc = append([]string{strings.TrimSpace(strings.TrimPrefix(t, "//"))}, doc...)
	}
	return doc
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
