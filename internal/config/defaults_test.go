package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// bare is minimal without its one partition: each value the loader returns
// for a key bare does not set is that key's default.
var bare = strings.Replace(minimal, ", partition_gpu: hpg-b200", "", 1)

// Defaults the loader does not apply itself, and why.
var notLoaderDefaults = map[string]string{
	"decon.psf_center":        `the loader keeps ""; the decon stage reads it as maximum (psf.go)`,
	"resources.partition_gpu": "legacy form: kintsugi-assign applies it (internal/assign)",
	"resources.partition_cpu": "legacy form: kintsugi-assign applies it (internal/assign)",
	"resources.gpu_slots":     "legacy form: kintsugi-assign applies it (internal/assign)",
	"output_format":           "no Go field: only tiff is written",
}

// TestSchemaDefaultsAreTheLoaders: the schema is the one home of every
// default. Every key's default in the schema is the value the loader gives
// when the key is absent, and every value the loader gives an absent key
// that is not the zero value has its default in the schema; the job
// resources (cpus_/mem_/time_, read by the Snakefile, not typed in Go) have
// theirs in the schema only. Fails when a default is added in one place and
// not the other.
func TestSchemaDefaultsAreTheLoaders(t *testing.T) {
	cfg, err := Parse("bare.yaml", []byte(bare))
	if err != nil {
		t.Fatal(err)
	}
	buf, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var loaded, schema map[string]any
	if err := json.Unmarshal(buf, &loaded); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	if bare == minimal {
		t.Fatal("bare: minimal has no partition_gpu to take out")
	}
	given := map[string]bool{"project_dir": true, "cycles": true, "channels": true, "channel_names": true, "tile_rows": true, "tile_cols": true,
		"tile_overlap": true, "ncc_threshold": true, "pou": true, "resources.accounts": true, "resources.accounts[].name": true,
		"resources.accounts[].gpu_slots": true}
	defs := schema["$defs"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
			merged := map[string]any{}
			for k, v := range defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any) {
				merged[k] = v
			}
			for k, v := range s { // the referring schema's default and description win
				merged[k] = v
			}
			return merged
		}
		return s
	}
	checked, seen := 0, map[string]bool{}
	var walk func(s map[string]any, got map[string]any, path string)
	walk = func(s map[string]any, got map[string]any, path string) {
		props, _ := s["properties"].(map[string]any)
		for k, raw := range props {
			sub := resolve(raw.(map[string]any))
			key := k
			if path != "" {
				key = path + "." + k
			}
			seen[key] = true
			v, inGo := got[k]
			if m, ok := v.(map[string]any); ok && sub["properties"] != nil {
				walk(sub, m, key)
				continue
			}
			if items, ok := sub["items"].(map[string]any); ok {
				if list, ok := v.([]any); ok && resolve(items)["properties"] != nil {
					for _, el := range list {
						walk(resolve(items), el.(map[string]any), key+"[]")
					}
					continue
				}
			}
			if given[key] {
				continue
			}
			def, hasDef := sub["default"]
			switch {
			case notLoaderDefaults[key] != "":
				if !hasDef {
					t.Errorf("%s: listed in notLoaderDefaults but the schema gives no default", key)
				}
			case inGo && hasDef:
				checked++
				if !reflect.DeepEqual(v, def) {
					t.Errorf("%s: the loader gives %v, the schema's default is %v", key, v, def)
				}
			case inGo && !isEmpty(v) && !reflect.ValueOf(v).IsZero():
				t.Errorf("%s: the loader gives %v but the schema has no default (add it there)", key, v)
			case !inGo && hasDef && !(strings.HasPrefix(key, "resources.") && IsJobResource(k)):
				t.Errorf("%s: the schema's default %v is applied by no one (not a loader field, not a job resource)", key, def)
			case !inGo && hasDef:
				checked++ // a job resource: the Snakefile's (rules/common.smk _res) and kintsugi-config init's default
			}
		}
	}
	walk(schema, loaded, "")
	for k := range notLoaderDefaults {
		if !seen[k] {
			t.Errorf("notLoaderDefaults names %s, which the schema does not have", k)
		}
	}
	if checked < 40 {
		t.Errorf("only %d defaults compared; the walk missed the schema's sections", checked)
	}
	t.Logf("%d schema defaults checked against the loader and the job resources", checked)
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// TestEverySchemaKeyHasADescription: the schema documents every key.
func TestEverySchemaKeyHasADescription(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(s map[string]any, path string)
	walk = func(s map[string]any, path string) {
		props, _ := s["properties"].(map[string]any)
		for k, raw := range props {
			sub := raw.(map[string]any)
			n++
			if d, _ := sub["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("schema key %s%s has no description", path, k)
			}
			walk(sub, path+k+".")
		}
	}
	walk(schema, "")
	for name, d := range schema["$defs"].(map[string]any) {
		walk(d.(map[string]any), "$defs."+name+".")
	}
	if n < 100 {
		t.Errorf("only %d schema keys walked", n)
	}
}

// TestResourceDefault: the job resources' defaults come from the schema;
// a key without one is an error naming it.
func TestResourceDefault(t *testing.T) {
	if v, err := ResourceDefault("mem_decon"); err != nil || v != 6144 {
		t.Errorf("ResourceDefault(mem_decon) = %d, %v; want 6144 (the schema's)", v, err)
	}
	if _, err := ResourceDefault("mem_signal_isolation"); err == nil || !strings.Contains(err.Error(), "resources.mem_signal_isolation") {
		t.Errorf("ResourceDefault(mem_signal_isolation): %v; want an error naming the key", err)
	}
	if _, ok := ResourceDefaults()["gpu_slots"]; ok {
		t.Error("ResourceDefaults has the legacy gpu_slots, not a job resource")
	}
}
