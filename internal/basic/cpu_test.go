package basic_test

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
)

func TestCPUConformance(t *testing.T) {
	basictest.Run(t, basic.CPU{})
}
