package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/progress"
	"github.com/sandcell/sandcell/rootfs"
)

// imageCommands are the subcommands of "sandcell image".
var imageCommands = []command{
	{name: "import", synopsis: "PATH [--name NAME] [--max-size SIZE] [--max-entries N] [--json]", summary: "import an OCI image layout (directory or archive) or a docker save archive", interspersed: true, setup: imageImportCommand},
	{name: "list", synopsis: "[--json]", summary: "list the imported images", setup: imageListCommand},
	{name: "rm", synopsis: "NAME...", summary: "remove images (their layers stay until rootfs prune)", setup: imageRmCommand},
}

// imageCommand: sandcell image import|list|rm manages the imported images
// (run environments: sandcell run --image NAME, the MCP tools' image).
func imageCommand(_ *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	return func(ctx context.Context, args []string) int { return env.subcommandUsage("image", imageCommands, args) }
}

// imageImportCommand: sandcell image import PATH [--name NAME].
func imageImportCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var opts rootfs.ImportOptions
	asJSON := fs.Bool("json", false, "print the imported image's record as JSON")
	fs.StringVar(&opts.Name, "name", "", "the name runs use (--image NAME); default: the name the image gives itself")
	config.SizeFlag(fs, &opts.MaxBytes, "max-size", "the most its layers may unpack or decompress to (default 8GiB)")
	fs.Int64Var(&opts.MaxEntries, "max-entries", 0, "the most entries (files, directories, links) its layers may hold (default 1000000)")
	return func(ctx context.Context, args []string) int {
		if len(args) != 1 {
			return env.usageError("image import", "give one PATH: an OCI image layout directory, an OCI archive or a docker save archive")
		}
		bar := progress.New(env.stderr, "image import", 0, 5*time.Second)
		opts.Progress = func(layer, layers int, diffID string) {
			bar.Set(layer-1, layers, fmt.Sprintf("layer %d of %d, %.19s", layer, layers, diffID))
		}
		img, err := env.store().ImportImage(ctx, args[0], opts)
		if err == nil {
			bar.Set(img.Report.Layers, 0, "done")
		}
		bar.Finish()
		if err != nil {
			return env.fail(err)
		}
		if *asJSON {
			return writeJSON(env.stdout, img)
		}
		r := img.Report
		fmt.Fprintf(env.stdout, "imported %s: %d layers (%d unpacked, %d shared), %.1f MB, %d entries, %.1f s\n",
			img.Name, r.Layers, r.Unpacked, r.Shared, float64(img.Bytes)/1e6, img.Entries, r.Seconds)
		if n := r.Neutralised; n.Total() > 0 {
			fmt.Fprintf(env.stdout, "neutralised (an image is untrusted): %d paths outside the root, %d entries through a symlink, "+
				"%d hard links out of a layer, %d device nodes, %d fifos and other types, %d setuid/setgid bits, %d foreign owners, %d with xattrs\n",
				n.PathsOutside, n.ThroughSymlink, n.LinksOutside, n.Devices, n.Special, n.SetID, n.Owners, n.Xattrs)
		}
		if ig := img.Config.Ignored; len(ig) > 0 {
			fmt.Fprintf(env.stdout, "not honoured in a sandbox: %s\n", strings.Join(ig, ", "))
		}
		if img.Config.User != "" {
			fmt.Fprintf(env.stdout, "runs as the sandbox user (uid %d), not the image's user %q\n", rootfs.SandboxUID, img.Config.User)
		}
		if img.Workdir != "" {
			fmt.Fprintf(env.stdout, "made its WorkingDir %s, which its layers lack (as docker does when a container starts)\n", img.Config.WorkingDir)
		}
		return 0
	}
}

// imageListCommand: sandcell image list [--json].
func imageListCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	asJSON := fs.Bool("json", false, "JSON output")
	return func(_ context.Context, args []string) int {
		if !env.noArgs("image list", args) {
			return 2
		}
		imgs, err := env.store().Images()
		if err != nil {
			return env.fail(err)
		}
		if *asJSON {
			if imgs == nil {
				imgs = []rootfs.Image{}
			}
			return writeJSON(env.stdout, imgs)
		}
		printImages(env, imgs)
		return 0
	}
}

func printImages(env *cliEnv, imgs []rootfs.Image) {
	w := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGE\tLAYERS\tSIZE\tSOURCE\tCONFIG\tIMPORTED")
	for _, img := range imgs {
		fmt.Fprintf(w, "%s\t%d\t%.1f MB\t%s\t%.19s\t%s\n", img.Name, len(img.Layers), float64(img.Bytes)/1e6, img.Source,
			img.ConfigDigest, img.Imported.Format("2006-01-02 15:04"))
	}
	w.Flush()
}

// imageRmCommand: sandcell image rm NAME...
func imageRmCommand(_ *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	return func(ctx context.Context, args []string) int {
		if len(args) == 0 {
			return env.usageError("image rm", "give the images to remove (see sandcell image list)")
		}
		store := env.store()
		for _, name := range args {
			if err := store.RemoveImage(ctx, name); err != nil {
				return env.fail(err)
			}
			fmt.Fprintf(env.stdout, "removed %s\n", name)
		}
		fmt.Fprintln(env.stdout, "its layers stay until: sandcell rootfs prune")
		return 0
	}
}
