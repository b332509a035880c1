package main

import "github.com/kintsugi-hpc/kintsugi-go/internal/config"

// checkRaw parses path as YAML only, by the loader's own rules
// (config.CheckRaw: a regular file of at most config.MaxFileBytes, one
// document, no anchors, aliases or merge keys, no duplicate keys, at most
// config.MaxKeysPerMapping keys per mapping and config.MaxDepth levels), so
// that the check and the loader cannot drift apart. Errors are
// *config.Error naming the file and, where there is one, the key.
func checkRaw(path string) error { return config.CheckRaw(path) }
