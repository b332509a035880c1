package decon

import "math"

// Percentiles returns the exact numpy (linear) percentiles qs of data,
// whose values must be >= 0 (|RL|): the order statistics are found by a
// two-pass radix selection on the float bits (non-negative float32 values
// order like their bit patterns): a histogram of the high 16 bits locates
// each wanted rank's bucket, a histogram of the low 16 bits inside it the
// value. The GPU runs the same two passes with atomics.
func Percentiles(data []float32, qs ...float64) (lo, hi float64) {
	n := len(data)
	var ranks []int
	for _, q := range qs {
		ranks = append(ranks, PercentileRanks(n, q)...)
	}
	vals := SelectRanks(data, ranks)
	at := func(i int) float64 {
		for j, r := range ranks {
			if r == i {
				return vals[j]
			}
		}
		panic("decon: rank not selected")
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = Percentile(n, q, at)
	}
	if len(out) == 1 {
		return out[0], out[0]
	}
	return out[0], out[1]
}

// SelectRanks returns the ranks-th smallest values of data (values >= 0).
func SelectRanks(data []float32, ranks []int) []float64 {
	var h1 [1 << 16]int64
	for _, v := range data {
		h1[math.Float32bits(v)>>16]++
	}
	type want struct {
		bucket uint32
		rest   int64 // rank within the bucket
	}
	ws := make([]want, len(ranks))
	for i, r := range ranks {
		var c int64
		for b := range h1 {
			if c+h1[b] > int64(r) {
				ws[i] = want{uint32(b), int64(r) - c}
				break
			}
			c += h1[b]
		}
	}
	// second pass: one low-bits histogram per distinct bucket
	hs := map[uint32]*[1 << 16]int64{}
	for _, w := range ws {
		if hs[w.bucket] == nil {
			hs[w.bucket] = new([1 << 16]int64)
		}
	}
	if len(hs) == 1 {
		var only uint32
		var h *[1 << 16]int64
		for b, hh := range hs {
			only, h = b, hh
		}
		for _, v := range data {
			if u := math.Float32bits(v); u>>16 == only {
				h[u&0xffff]++
			}
		}
	} else {
		for _, v := range data {
			u := math.Float32bits(v)
			if h, ok := hs[u>>16]; ok {
				h[u&0xffff]++
			}
		}
	}
	out := make([]float64, len(ranks))
	for i, w := range ws {
		h := hs[w.bucket]
		var c int64
		for b := range h {
			if c+h[b] > w.rest {
				out[i] = float64(math.Float32frombits(w.bucket<<16 | uint32(b)))
				break
			}
			c += h[b]
		}
	}
	return out
}
