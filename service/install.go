package service

import (
	"context"

	"github.com/sandcell/sandcell/executor"
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
	var record func(lang string, reqs []string) error
	if req.SessionID != "" {
		sess, err := s.session(req.SessionID)
		if err != nil {
			return mcp.InstallResult{}, err
		}
		unlock, err := sess.Lock(ctx)
		if err != nil {
			return mcp.InstallResult{}, err
		}
		defer unlock()
		in.Installed = sess.Meta().Deps
		record = sess.SetDeps
	}
	d, err := s.exec.Install(ctx, in)
	if err != nil {
		return mcp.InstallResult{}, err
	}
	m := d.Manifest
	if record != nil {
		if err := record(d.Language, m.Requirements); err != nil {
			return mcp.InstallResult{}, err
		}
	}
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
