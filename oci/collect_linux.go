package oci

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// maxCollectFiles bounds the number of files Collect reads back from /work.
const maxCollectFiles = 4096

// Collect reads the regular files of a finished run's /work (a compile
// phase's outputs, see Request.Collect), at most limit bytes together. It goes through an os.Root and
// opens with O_NOFOLLOW: a symlink the program planted is skipped, never
// followed onto the host.
func Collect(work string, limit int64) ([]api.File, error) {
	root, err := os.OpenRoot(work)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var files []api.File
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if len(files) == maxCollectFiles {
			return fmt.Errorf("more than %d files in /work", maxCollectFiles)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > limit {
			return fmt.Errorf("/work holds more than %d bytes", limit)
		}
		f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, fi.Size()+1))
		if err != nil {
			return err
		}
		if int64(len(data)) != fi.Size() {
			return errors.New(name + " changed while being read")
		}
		files = append(files, api.File{Path: name, Data: data, Mode: fi.Mode().Perm()})
		return nil
	})
	return files, err
}
