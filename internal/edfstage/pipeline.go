package edfstage

import (
	"context"
	"fmt"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// fuseStreamed is one channel on an engine's streamed form: readers
// goroutines read the planes (files, z order, h x w px each) and each plane
// goes to the device stack as soon as it is read and is dropped; then the
// stack is fused. readS is the reading and uploading time, seconds.
func fuseStreamed(ctx context.Context, st Streamer, files []string, h, w, readers int, g edf.Gate, p edf.Params,
	collect func()) (r *edf.Result, readS float64, err error) {
	s, err := st.EDFDeviceStack(ctx, len(files), h, w)
	if err != nil {
		return nil, 0, err
	}
	defer s.Free()
	t := time.Now()
	err = par.ForEach(ctx, len(files), readers, func(z int) error {
		pl, err := tiffio.ReadGray16(files[z])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInput, err)
		}
		if pl.W != w || pl.H != h {
			return staging.Inputf("%s is %d x %d px, %s is %d x %d (W x H): the planes of a stack must have one size",
				files[z], pl.W, pl.H, files[0], w, h)
		}
		if err := s.Put(ctx, z, pl); err != nil {
			return err
		}
		collect() // pl is garbage now
		return nil
	})
	readS = time.Since(t).Seconds()
	if err != nil {
		return nil, readS, err
	}
	r, err = s.Fuse(ctx, g, p)
	return r, readS, err
}

// fuseStacked runs the channels on an engine that takes whole stacks: a
// reader goroutine reads the channels' stacks in order into at most
// mp.Stacks stack slots (a slot is taken before a stack is read and given
// back as soon as the stack is fused, before its result is written), so
// stacks in memory never exceed the plan.
func fuseStacked(ctx context.Context, o Options, stacks [][]string, mp memPlan, g edf.Gate, p edf.Params, collect func(),
	fuseErr func(int, error) error, done func(i int, r *edf.Result, planes int, readS, edfS float64) error) error {
	type loaded struct {
		planes []*raster.Gray16
		secs   float64
		err    error
	}
	next := make(chan loaded, len(stacks))
	slots := make(chan struct{}, max(1, mp.Stacks))
	rctx, cancel := context.WithCancel(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for i := range stacks {
			select {
			case slots <- struct{}{}:
			case <-rctx.Done():
				return
			}
			t := time.Now()
			pl, err := ReadPlanes(rctx, stacks[i], max(1, mp.Readers))
			next <- loaded{pl, time.Since(t).Seconds(), err}
			if err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-readDone }()
	for i := range stacks {
		var ld loaded
		select {
		case ld = <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
		if ld.err != nil {
			return ld.err
		}
		t := time.Now()
		r, err := o.Engine.EDF(ctx, ld.planes, g, p)
		if err != nil {
			return fuseErr(i, err)
		}
		edfS := time.Since(t).Seconds()
		n := len(ld.planes)
		ld.planes = nil
		collect()
		<-slots
		if err := done(i, r, n, ld.secs, edfS); err != nil {
			return err
		}
	}
	return nil
}
