package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// The schema is JSON Schema 2020-12 (Snakemake 9 validates with 2020-12 and
// warns about draft-07) and uses $defs, which schemaDescription follows.
func TestSchemaDialect(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(SchemaJSON(), &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want the 2020-12 dialect", got)
	}
	if _, ok := doc["definitions"]; ok {
		t.Error("schema still has draft-07 definitions; 2020-12 uses $defs")
	}
	// A key inside a $ref'd definition gets its description in the message.
	_, err := Parse("c.yaml", []byte(strings.Replace(minimal, "gpu_slots: 3", "gpu_slots: -1", 1)))
	if err == nil || !strings.Contains(err.Error(), "resources.accounts[0].gpu_slots") || !strings.Contains(err.Error(), "QOS gres/gpu limit") {
		t.Errorf("err = %v, want the key and its $defs description", err)
	}
}

// Slot counts are bounded in the schema, so no value near 2^63 reaches the
// assignment helper, and the live key is a boolean.
func TestBounds(t *testing.T) {
	for _, tc := range []struct{ name, old, new, key string }{
		{"huge gpu_slots", "gpu_slots: 3", "gpu_slots: 9223372036854775807", "resources.accounts[0].gpu_slots"},
		{"gpu_slots over 2^64", "gpu_slots: 3", "gpu_slots: 18446744073709551616", "resources.accounts[0].gpu_slots"},
		{"gpu_slots above the bound", "gpu_slots: 3", "gpu_slots: 200000000", "resources.accounts[0].gpu_slots"},
		{"huge live gpu_avail", "pou: 0.5", "pou: 0.5\nlive_accounts: [{name: clive, gpu_avail: 9223372036854775807}]", "live_accounts"},
		{"live not boolean", "pou: 0.5", "pou: 0.5\nlive: maybe", "live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(strings.Replace(minimal, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), "key "+tc.key) {
				t.Errorf("err = %v, want one naming key %s", err, tc.key)
			}
		})
	}
	c, err := Parse("c.yaml", []byte(strings.Replace(minimal, "pou: 0.5", "pou: 0.5\nlive: true", 1)))
	if err != nil || !c.Live {
		t.Errorf("live: true: cfg.Live = %v, err = %v", c != nil && c.Live, err)
	}
	if c, err := Parse("c.yaml", []byte(strings.Replace(minimal, "gpu_slots: 3", "gpu_slots: 100000", 1))); err != nil || c.Resources.Accounts[0].GPUSlots != 100000 {
		t.Errorf("gpu_slots at the bound: err = %v", err)
	}
}
