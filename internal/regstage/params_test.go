package regstage

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// TestParamsDefaults: the config's defaults map to the algorithm's (the two
// are written down once each; this holds them together).
func TestParamsDefaults(t *testing.T) {
	if got, want := Params(config.DefaultRegistration()), register.DefaultParams(); got != want {
		t.Errorf("Params(config.DefaultRegistration()) = %+v, want register.DefaultParams() %+v", got, want)
	}
}

func TestParamsKeys(t *testing.T) {
	r := config.DefaultRegistration()
	r.MaxImageDim, r.RigidOnly, r.NonRigid.MaxDim, r.NonRigid.SigmaRatio = 512, true, 256, 0.05
	got := Params(r)
	want := register.DefaultParams()
	want.MaxImageDim, want.RigidOnly, want.NonRigidMaxDim, want.SigmaRatio = 512, true, 256, 0.05
	if got != want {
		t.Errorf("Params = %+v, want %+v", got, want)
	}
}
