package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const usage = `usage:
  mkimage build -bin DIR -out FILE.tar -name NAME:TAG -epoch SECONDS [-version V -revision SHA -source URL -platforms linux/amd64,linux/arm64]
  mkimage push [-insecure] -in FILE.tar REF`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return build(args[1:])
	case "push":
		return push(args[1:])
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var s spec
	fs.StringVar(&s.binDir, "bin", "", "directory with one <os>_<arch>/ directory of binaries per platform (required)")
	out := fs.String("out", "", "the OCI layout tarball to write (required)")
	ref := fs.String("name", "", "the image's name with its tag, as ctr images import names it (required)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "platforms, comma-separated")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every time in the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH; required)")
	fs.StringVar(&s.version, "version", "", "org.opencontainers.image.version")
	fs.StringVar(&s.revision, "revision", "", "org.opencontainers.image.revision")
	fs.StringVar(&s.source, "source", "", "org.opencontainers.image.source")
	digestFile := fs.String("digest-file", "", "also write the index digest to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("build: unexpected arguments %q", fs.Args())
	}
	if s.binDir == "" || *out == "" || *ref == "" || *epoch == "" {
		return errors.New("build: -bin, -out, -name and -epoch are required")
	}
	sec, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("build: -epoch %q: want seconds since 1970", *epoch)
	}
	s.created = time.Unix(sec, 0).UTC()
	if s.platforms, err = parsePlatforms(*platforms); err != nil {
		return err
	}
	idx, err := s.index()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, idx, *ref, s.created); err != nil {
		return err
	}
	// Write, then rename: a failed build leaves no half tarball.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	if *digestFile != "" {
		if err := os.WriteFile(*digestFile, []byte(d.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%s %s %s (%d bytes)\n", *out, *ref, d, buf.Len())
	return nil
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	in := fs.String("in", "", "the OCI layout tarball of mkimage build (required)")
	insecure := fs.Bool("insecure", false, "the registry speaks plain HTTP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || fs.NArg() != 1 {
		return errors.New("push: want -in FILE.tar and one REF")
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(fs.Arg(0), opts...)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mkimage-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	idx, err := readArchive(*in, filepath.Join(tmp, "layout"))
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref.Context(), d)
	return nil
}
