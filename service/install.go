package service

import (
	"context"

	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rootfs"
)

// InstallDependencies is mcp.Installer: it installs req.Packages (with
// what the session installed before for the language, if it names one)
// and, with a session, records the whole set in the session's meta.json,
// so that its later runs in that language see the packages, also after a
// restart.
func (s *Service) InstallDependencies(ctx context.Context, req mcp.InstallRequest) (mcp.InstallResult, error) {
	in := executor.InstallRequest{Language: req.Language, Packages: req.Packages, Admit: s.admit()}
	var d *executor.Deps
	var err error
	if req.SessionID == "" {
		d, err = s.exec.Install(ctx, in)
	} else {
		err = s.locked(ctx, req.SessionID, func(sess *workspace.Session) error {
			in.Installed = sess.Meta().Deps
			var err error
			if d, err = s.exec.Install(ctx, in); err != nil {
				return err
			}
			return sess.SetDeps(d.Language, d.Manifest.Requirements)
		})
	}
	if err != nil {
		return mcp.InstallResult{}, err
	}
	m := d.Manifest
	return mcp.InstallResult{Language: d.Language, Requirements: m.Requirements, Layer: m.Key, Cached: d.Cached, Bytes: m.Bytes,
		Files: m.Files, InstallMS: m.InstallMS, MountPath: rootfs.DepsDir, Env: d.Env, SessionID: req.SessionID,
		Output: executor.Tail(d.Output, 4000)}, nil
}

// installLanguages are the language names and aliases that have an
// installer (install_dependencies' enum).
func installLanguages() []string {
	var langs []string
	for _, i := range rootfs.Installers() {
		if l, err := rootfs.Lookup(i.Language); err == nil {
			langs = append(langs, l.Name)
			langs = append(langs, l.Aliases...)
		}
	}
	return langs
}
