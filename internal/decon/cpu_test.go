package decon_test

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon/decontest"
)

func TestCPU(t *testing.T) { decontest.Run(t, decon.CPU{}) }
