package stitch

import (
	"context"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// reserveSink is a Sink that only reserves memory.
type reserveSink struct{ bytes int64 }

func (s reserveSink) Reserve(h, w, n int) int64                          { return s.bytes }
func (reserveSink) Begin(context.Context, string, int, int, []int) error { return nil }
func (reserveSink) Plane(context.Context, int, int, *raster.Gray16) error {
	return nil
}
func (reserveSink) End(context.Context) error { return nil }

// TestBudgetLessSinkReserve: the stage plans within MemBudget less the
// sink's reserve (at least one byte: a budget it cannot meet is refused by
// the plan), and without a sink or a budget within MemBudget as it is.
func TestBudgetLessSinkReserve(t *testing.T) {
	r := &cycleRun{o: Options{MemBudget: 1000, Sink: reserveSink{300}}, cyc: &dataset.Cycle{Z: []int{1, 2}}}
	for _, c := range []struct {
		budget int64
		sink   Sink
		want   int64
	}{{1000, reserveSink{300}, 700}, {1000, reserveSink{5000}, 1}, {1000, nil, 1000}, {0, reserveSink{300}, 0}} {
		r.o.MemBudget, r.o.Sink = c.budget, c.sink
		if got := r.budget(); got != c.want {
			t.Errorf("budget %d, sink %v: plan within %d, want %d", c.budget, c.sink, got, c.want)
		}
	}
}
