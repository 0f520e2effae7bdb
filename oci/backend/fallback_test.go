package backend

import (
	"errors"
	"testing"

	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
)

// TestForkFallbackReasons: each way compilePlan declines a config is an
// errForkUnsupported (libcontainer then starts it) with a named reason.
func TestForkFallbackReasons(t *testing.T) {
	base := func() (*configs.Config, *libcontainer.Process) {
		c := &configs.Config{
			Rootfs:  "/",
			Seccomp: &configs.Seccomp{},
			Namespaces: configs.Namespaces{
				{Type: configs.NEWUSER}, {Type: configs.NEWNS}, {Type: configs.NEWPID},
			},
		}
		p := &libcontainer.Process{Init: true, Capabilities: &configs.Capabilities{}, Env: []string{"PATH=/bin", "HOME=/work"}}
		return c, p
	}
	c, p := base()
	if _, _, err := compilePlan(c, p, "x"); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*configs.Config, *libcontainer.Process)
		want   fallbackReason
	}{
		{"no rootfs", func(c *configs.Config, _ *libcontainer.Process) { c.Rootfs = "" }, fallbackConfig},
		{"routes", func(c *configs.Config, _ *libcontainer.Process) { c.Routes = []*configs.Route{{}} }, fallbackNetwork},
		{"no seccomp", func(c *configs.Config, _ *libcontainer.Process) { c.Seccomp = nil }, fallbackSeccomp},
		{"not init", func(_ *configs.Config, p *libcontainer.Process) { p.Init = false }, fallbackProcess},
		{"a capability", func(_ *configs.Config, p *libcontainer.Process) { p.Capabilities.Bounding = []string{"CAP_KILL"} }, fallbackProcess},
		{"joined namespace", func(c *configs.Config, _ *libcontainer.Process) { c.Namespaces[0].Path = "/proc/1/ns/user" }, fallbackNamespace},
		{"no pid namespace", func(c *configs.Config, _ *libcontainer.Process) { c.Namespaces = c.Namespaces[:2] }, fallbackNamespace},
		{"an interface", func(c *configs.Config, _ *libcontainer.Process) { c.Networks = []*configs.Network{{Type: "veth"}} }, fallbackNetwork},
		{"a mount type", func(c *configs.Config, _ *libcontainer.Process) { c.Mounts = []*configs.Mount{{Device: "overlay"}} }, fallbackMount},
		{"a block device", func(c *configs.Config, _ *libcontainer.Process) {
			c.Devices = []*devices.Device{{Path: "/dev/sda", Rule: devices.Rule{Type: devices.BlockDevice}}}
		}, fallbackDevice},
		{"no HOME", func(_ *configs.Config, p *libcontainer.Process) { p.Env = p.Env[:1] }, fallbackEnv},
	} {
		c, p := base()
		tc.change(c, p)
		_, _, err := compilePlan(c, p, "x")
		if !errors.Is(err, errForkUnsupported) || fallbackOf(err) != tc.want {
			t.Errorf("%s: %v (reason %q), want errForkUnsupported with reason %q", tc.name, err, fallbackOf(err), tc.want)
		}
	}
}
