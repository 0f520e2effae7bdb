package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// WriteBundle writes s as an OCI bundle's config.json into dir, so that the
// runc CLI and runsc can run exactly the spec the in-process runtime runs
// (side-by-side benchmarks, the gVisor backend). The root filesystem is not
// copied: the spec's root.path stays the absolute path of the layer.
func WriteBundle(dir string, s *specs.Spec) error {
	if s.Root == nil || !filepath.IsAbs(s.Root.Path) {
		return fmt.Errorf("%w: bundle root must be an absolute path", ErrInvalidRequest)
	}
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o600)
}
