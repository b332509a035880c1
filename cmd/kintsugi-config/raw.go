package main

// TODO(coordinator): helper "harden" adds the loader's own syntax-level entry
// point to internal/config (config.CheckRaw). When it is in main, make
// checkRaw call it and delete the rest of this file, so that the check and
// the loader cannot drift apart.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// Bounds of a raw config file.
const (
	maxRawBytes       = 1 << 20
	maxKeysPerMapping = 1000
	maxDepth          = 64
)

// checkRaw parses path as YAML only: at most maxRawBytes, one document, no
// anchors or aliases, no duplicate keys, at most maxKeysPerMapping keys per
// mapping and maxDepth levels. Errors are *config.Error naming the file and,
// where there is one, the key.
func checkRaw(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRawBytes+1))
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxRawBytes {
		return &config.Error{File: path, Msg: fmt.Sprintf("larger than %d bytes: not a config file", maxRawBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &config.Error{File: path, Msg: "empty file"}
		}
		return &config.Error{File: path, Msg: "invalid YAML: " + err.Error()}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return &config.Error{File: path, Msg: "more than one YAML document (a second '---'): want one"}
	}
	return walkRaw(path, &doc, "", 0)
}

func walkRaw(path string, n *yaml.Node, at string, depth int) error {
	bad := func(format string, args ...any) error {
		key := at
		if key == "" {
			key = "(top level)"
		}
		return &config.Error{File: path, Key: key, Msg: fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}
	}
	if depth > maxDepth {
		return bad("nested more than %d levels deep", maxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return bad("YAML alias *%s: aliases are refused (write the value out)", n.Value)
	}
	if n.Anchor != "" {
		return bad("YAML anchor &%s: anchors are refused (write the value out)", n.Anchor)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := walkRaw(path, c, at, depth+1); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := walkRaw(path, c, at+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		if len(n.Content)/2 > maxKeysPerMapping {
			return bad("%d keys in one mapping: at most %d", len(n.Content)/2, maxKeysPerMapping)
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := k.Value
			sub := key
			if at != "" {
				sub = at + "." + key
			}
			if k.Kind != yaml.ScalarNode || k.Anchor != "" {
				if err := walkRaw(path, k, sub, depth+1); err != nil {
					return err // an alias or anchor as key
				}
				return bad("a %s as a mapping key: want a plain key", kindName(k.Kind))
			}
			if key == "<<" {
				return bad("merge key '<<': refused (write the values out)")
			}
			if first, dup := seen[key]; dup {
				return &config.Error{File: path, Key: sub, Msg: fmt.Sprintf("line %d: duplicate key (first at line %d)", k.Line, first)}
			}
			seen[key] = k.Line
			if err := walkRaw(path, v, sub, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
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
