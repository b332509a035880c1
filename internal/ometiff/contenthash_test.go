package ometiff

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestContentHash: the digest depends on the bytes only, not on how the
// writes split them; any changed byte, an appended zero and other
// metadata each change it.
func TestContentHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*hashBlock+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	digest := func(meta string, b []byte, split func() int) []byte {
		h := newContentHash(meta)
		for len(b) > 0 {
			k := min(len(b), split())
			h.Write(b[:k])
			b = b[k:]
		}
		return h.Sum()
	}
	whole := digest("m", data, func() int { return len(data) })
	for _, split := range []func() int{
		func() int { return 1 + rng.IntN(3*hashBlock) },
		func() int { return 1 + rng.IntN(100) + rng.IntN(2)*hashBlock },
		func() int { return hashBlock },
	} {
		if got := digest("m", data, split); !bytes.Equal(got, whole) {
			t.Fatal("the digest depends on how the writes are split")
		}
	}
	one := func() int { return len(data) + 1 }
	for _, pos := range []int{0, hashBlock - 1, hashBlock, 2*hashBlock + 7, len(data) - 1} {
		c := bytes.Clone(data)
		c[pos] ^= 0x10
		if bytes.Equal(digest("m", c, one), whole) {
			t.Errorf("byte %d changed, same digest", pos)
		}
	}
	if bytes.Equal(digest("m", append(bytes.Clone(data), 0), one), whole) {
		t.Error("an appended zero byte kept the digest")
	}
	if bytes.Equal(digest("n", data, one), whole) {
		t.Error("other metadata kept the digest")
	}
}
