//go:build !amd64

package decon

// haveFMA: no vector form on this architecture; axpyFMA runs axpyFMAGo.
const haveFMA = false

func axpyFMAVec(o, s *float32, n int, kv float32) {
	panic("decon: axpyFMAVec: no vector form on this architecture")
}
