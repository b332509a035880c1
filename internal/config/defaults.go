package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
)

// resourceDefaults is the schema's default of every job resource of
// resources (cpus_* counts, mem_* MB, time_* minutes: the keys IsJobResource
// names), read once from the embedded schema.
var resourceDefaults = sync.OnceValue(func() map[string]int {
	var doc struct {
		Properties struct {
			Resources struct {
				Properties map[string]struct {
					Default json.RawMessage `json:"default"`
				} `json:"properties"`
			} `json:"resources"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schemaJSON, &doc); err != nil {
		panic("config: embedded schema: " + err.Error())
	}
	out := map[string]int{}
	for k, p := range doc.Properties.Resources.Properties {
		if p.Default == nil || !IsJobResource(k) {
			continue
		}
		n, err := strconv.Atoi(string(p.Default))
		if err != nil {
			panic(fmt.Sprintf("config: embedded schema: resources.%s: default %s is not an integer", k, p.Default))
		}
		out[k] = int(n)
	}
	return out
})

// ResourceDefault returns the schema's default of resources.<key>, the one
// home of the job resources' defaults (the Snakefile's rules read the same
// schema): cpus_<stage> (cpus_per_task), mem_<stage> (MB at attempt 1) and
// time_<stage> (minutes). It is an error when the schema gives key none.
func ResourceDefault(key string) (int, error) {
	v, ok := resourceDefaults()[key]
	if !ok {
		return 0, fmt.Errorf("config schema: resources.%s has no integer default", key)
	}
	return v, nil
}

// ResourceDefaults returns every resources key with an integer default in
// the schema, and the default.
func ResourceDefaults() map[string]int { return maps.Clone(resourceDefaults()) }

// IsJobResource reports whether resources.<key> is a job resource the rules
// read: cpus_<job>, mem_<job> or time_<job> (not the original's cpu_* keys of
// its CPU jobs, nor the legacy account form).
func IsJobResource(key string) bool {
	for _, p := range []string{"cpus_", "mem_", "time_"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
