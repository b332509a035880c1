package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"gopkg.in/yaml.v3"

	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
)

// Bounds on a config file, checked before and while it is parsed, so that a
// hostile or mistaken file cannot hang or exhaust the process (and so that
// the Snakefile, which validates the raw file with CheckRaw first, accepts
// exactly what the executables accept). A real config is a few KB with a few
// hundred nodes and at most a few dozen keys in one mapping.
const (
	MaxFileBytes      = 1 << 20 // bytes of the file
	MaxNodes          = 100_000 // YAML nodes (scalars, sequences, mappings) in all
	MaxKeysPerMapping = 1024    // keys of one mapping (yaml.v3's duplicate check is quadratic in them)
	MaxDepth          = 64      // nesting of sequences and mappings
)

// LoadContext is Load, giving up with ctx's error when ctx is cancelled
// between reading, parsing and validating (each is bounded by the limits
// above: well under a second for the largest file accepted).
func LoadContext(ctx context.Context, path string) (*Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg, err := Parse(path, data)
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("config %s: %w", path, cerr)
	}
	return cfg, err
}

// CheckRaw checks a config file strictly as a file and as YAML, without the
// schema: a regular file of at most MaxFileBytes, not empty, one YAML
// document, no anchors, aliases or merge keys, no duplicate keys (1 and "1" are the same key, as
// in the decoded config), at most MaxNodes nodes, MaxKeysPerMapping keys in
// one mapping and MaxDepth levels. `kintsugi-config check --raw` runs it so
// that the Snakefile refuses what the executables refuse before it loads
// the file itself. Errors are *Error naming the file (and line).
func CheckRaw(path string) error {
	data, err := readBounded(path)
	if err != nil {
		return err
	}
	raw, err := parseYAML(path, data)
	if err == nil && raw == nil {
		return &Error{File: path, Msg: "empty file; see the documented example config.yaml"}
	}
	return err
}

// readBounded reads a config file: only a regular file (package safefile:
// a FIFO, device or directory is refused before it is opened, and the open
// does not block), of at most MaxFileBytes.
func readBounded(path string) ([]byte, error) {
	data, err := safefile.ReadFile(path, MaxFileBytes)
	switch {
	case errors.Is(err, safefile.ErrNotRegular):
		return nil, &Error{File: path, Msg: err.Error() + ": a config must be a file"}
	case errors.Is(err, safefile.ErrTooLarge):
		return nil, &Error{File: path, Msg: fmt.Sprintf("file is larger than the %d-byte (1 MiB) limit on a config", MaxFileBytes)}
	case err != nil:
		if pe, ok := err.(*fs.PathError); ok && pe.Path == path {
			err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return data, nil
}

// parseYAML parses data as one YAML document into plain Go values, after
// the structural checks of CheckRaw on the node tree (linear in its size).
func parseYAML(path string, data []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty file
		}
		return nil, &Error{File: path, Msg: "invalid YAML: " + err.Error()}
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		line := second.Line
		if err != nil {
			return nil, &Error{File: path, Msg: "invalid YAML: " + err.Error()}
		}
		return nil, &Error{File: path, Msg: fmt.Sprintf("line %d: more than one YAML document (a second '---'): a config is one document", line)}
	}
	nodes := 0
	return value(path, &doc, "", 0, &nodes)
}

// value checks the node tree (CheckRaw's rules) and converts it to plain Go
// values as yaml.v3 would (maps with string keys: a key 1 becomes "1", as
// jsonLike then writes it), in one linear pass: yaml.v3's own decoding
// compares the keys of a mapping pairwise.
func value(path string, n *yaml.Node, at string, depth int, nodes *int) (any, error) {
	fail := func(format string, args ...any) error {
		return &Error{File: path, Key: at, Msg: fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}
	}
	*nodes++
	if *nodes > MaxNodes {
		return nil, fail("more than %d YAML nodes: not a config", MaxNodes)
	}
	if depth > MaxDepth {
		return nil, fail("nested more than %d levels deep", MaxDepth)
	}
	if n.Anchor != "" {
		return nil, fail("YAML anchor &%s: anchors are refused in a config (write the value out)", n.Anchor)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return value(path, n.Content[0], at, depth+1, nodes)
	case yaml.AliasNode:
		return nil, fail("YAML alias *%s: aliases are refused in a config (write the value out)", n.Value)
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fail("%v", err)
		}
		return v, nil
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := value(path, c, fmt.Sprintf("%s[%d]", at, i), depth+1, nodes)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		if len(n.Content)/2 > MaxKeysPerMapping {
			return nil, fail("%d keys in one mapping: at most %d", len(n.Content)/2, MaxKeysPerMapping)
		}
		out := make(map[string]any, len(n.Content)/2)
		lines := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			*nodes++
			if k.Kind == yaml.AliasNode || k.Anchor != "" {
				return nil, &Error{File: path, Key: at, Msg: fmt.Sprintf("line %d: a YAML alias or anchor as a mapping key: refused", k.Line)}
			}
			if k.Kind != yaml.ScalarNode {
				return nil, &Error{File: path, Key: at, Msg: fmt.Sprintf("line %d: a %s as a mapping key: want a plain key", k.Line, kindName(k.Kind))}
			}
			if k.Tag == "!!merge" || (k.Value == "<<" && k.Style == 0) {
				return nil, &Error{File: path, Key: at, Msg: fmt.Sprintf("line %d: merge key '<<': refused in a config (write the values out)", k.Line)}
			}
			var kv any
			if err := k.Decode(&kv); err != nil {
				return nil, &Error{File: path, Msg: fmt.Sprintf("line %d: key %q: %v", k.Line, k.Value, err)}
			}
			name := fmt.Sprint(kv)
			sub := name
			if at != "" {
				sub = at + "." + name
			}
			if line, dup := lines[name]; dup {
				return nil, &Error{File: path, Key: sub, Msg: fmt.Sprintf("line %d: duplicate key (first at line %d)", k.Line, line)}
			}
			lines[name] = k.Line
			v, err := value(path, n.Content[i+1], sub, depth+1, nodes)
			if err != nil {
				return nil, err
			}
			out[name] = v
		}
		return out, nil
	}
	return nil, fail("unexpected YAML node kind %d", n.Kind)
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return "non-scalar"
}
