package regstage

import (
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// Params maps the config's registration section to the algorithm's
// parameters: the one place where registration keys become register.Params
// (max_image_dim, rigid_only, non_rigid.max_dim, non_rigid.sigma_ratio, px
// and a fraction of the working long side); the search settings are
// register.DefaultParams'. Params(config.DefaultRegistration()) is
// register.DefaultParams().
func Params(r config.Registration) register.Params {
	p := register.DefaultParams()
	p.MaxImageDim, p.RigidOnly = r.MaxImageDim, r.RigidOnly
	p.NonRigidMaxDim, p.SigmaRatio = r.NonRigid.MaxDim, r.NonRigid.SigmaRatio
	return p
}
