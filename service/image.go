package service

import (
	"context"
	"slices"
	"time"

	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rootfs"
)

// Images lists the imported images (mcp.Images), for list_languages.
func (s *Service) Images(context.Context) ([]mcp.ImageInfo, error) {
	imgs, err := s.exec.Store().Images()
	if err != nil {
		return nil, err
	}
	out := make([]mcp.ImageInfo, len(imgs))
	for i, img := range imgs {
		out[i] = mcp.ImageInfo{Name: img.Name, Layers: len(img.Layers), Bytes: img.Bytes, Env: slices.Clone(img.Config.Env),
			Entrypoint: slices.Clone(img.Config.Entrypoint), Cmd: slices.Clone(img.Config.Cmd)}
	}
	return out, nil
}

// CreateImageSession makes a session whose runs are in the imported image
// unless they name another (mcp.Images). The image must be imported now;
// a run after it was removed is refused with the image's name.
func (s *Service) CreateImageSession(ctx context.Context, language, image string, ttl time.Duration) (mcp.SessionInfo, error) {
	if _, err := s.exec.Store().Image(image); err != nil {
		return mcp.SessionInfo{}, err
	}
	if language != "" {
		l, err := rootfs.Lookup(language)
		if err != nil {
			return mcp.SessionInfo{}, err
		}
		language = l.Name
	}
	m, err := s.ws.CreateIn(language, image, ttl)
	if err != nil {
		return mcp.SessionInfo{}, err
	}
	s.log.Info("session created", "session", m.ID, "language", m.Language, "image", m.Image, "ttl", m.TTL)
	return mcp.SessionInfo{SessionID: m.ID, Language: m.Language, Image: m.Image, Expires: m.LastUsed.Add(m.TTL),
		TTLSecs: int64(m.TTL / time.Second), QuotaB: m.Quota}, nil
}
