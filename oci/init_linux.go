package oci

import (
	"os"

	"github.com/opencontainers/runc/libcontainer"
	// nsenter's C constructor does the namespace work of the container's
	// init before the Go runtime starts (it acts only when the init
	// environment variables are set).
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// Init is libcontainer's re-exec hook. The container's first process is
// this same binary started as "<binary> init"; Init must be called before
// anything else in main's package init. It does not return in that case
// (the program is exec'd), and returns at once otherwise.
func Init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}
