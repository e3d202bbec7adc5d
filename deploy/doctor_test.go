package deploy

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/doctor"
)

// TestDoctorPassesEveryTemplate runs the offline `gapless doctor` on every SAM template of the
// repository, with its defaults and with each environment of the samconfig.toml beside it (as
// `gapless doctor --template` reads it), and requires no error-level finding: an example a
// user copies, and the service `gapless-dev new` writes, must pass the project's own checks.
func TestDoctorPassesEveryTemplate(t *testing.T) {
	t.Parallel()
	for _, rel := range append(samTemplates(t), scaffoldTemplate) {
		path := templatePath(t, rel)
		envs := map[string]map[string]string{"parameter-defaults": nil}
		sam := filepath.Join(filepath.Dir(path), "samconfig.toml")
		if _, err := os.Stat(sam); err == nil {
			sc, err := doctor.LoadSamconfig(sam)
			if err != nil {
				t.Fatal(err)
			}
			for section := range sc {
				if env, ok := strings.CutSuffix(section, ".deploy.parameters"); ok {
					over, err := sc.Overrides(env)
					if err != nil {
						t.Fatalf("%s: %v", sam, err)
					}
					envs[env] = over
				}
			}
		}
		for _, env := range slices.Sorted(maps.Keys(envs)) {
			t.Run(rel+"/"+env, func(t *testing.T) {
				tp, err := doctor.LoadTemplate(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := tp.Override(envs[env]); err != nil {
					t.Fatal(err)
				}
				rep := doctor.Run(doctor.FromTemplate(tp, rel, 0))
				if rep.Checked != len(doctor.Checks) {
					t.Errorf("ran %d checks of %d", rep.Checked, len(doctor.Checks))
				}
				if rep.Errors() > 0 {
					var b bytes.Buffer
					_ = doctor.Write(&b, rep)
					t.Errorf("gapless doctor --template %s: %d errors\n%s", rel, rep.Errors(), b.String())
				}
			})
		}
	}
}
