package seccomp_test

import (
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/seccomp"
)

func ExampleProfile() {
	filter, err := seccomp.Profile()
	if err != nil {
		fmt.Println(err) // not amd64 or arm64
		return
	}
	spec := specs.Spec{Linux: &specs.Linux{Seccomp: filter}}
	fmt.Println(spec.Linux.Seccomp.DefaultAction, *spec.Linux.Seccomp.DefaultErrnoRet, len(spec.Linux.Seccomp.Architectures))
	// Output: SCMP_ACT_ERRNO 1 1
}
