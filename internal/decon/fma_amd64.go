package decon

import "golang.org/x/sys/cpu"

// haveFMA reports whether axpyFMAVec may run: AVX2 and FMA3 (Haswell and
// later, every Zen).
var haveFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// axpyFMAVec sets o[i] = fma(kv, s[i], o[i]) for i < n with VFMADD231PS
// (8 lanes) and VFMADD231SS for the tail (fma_amd64.s).
//
//go:noescape
func axpyFMAVec(o, s *float32, n int, kv float32)
