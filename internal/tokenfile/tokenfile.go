// Package tokenfile reads bearer tokens from files, for the coordinator
// and its clients alike.
package tokenfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrExposed is the error of a token file that grants "other" users any
// permission.
var ErrExposed = errors.New("tokenfile: readable by other users")

// Read returns the token in the file at path: its content, trimmed. An
// empty file is an error, and so is a file whose mode grants any
// permission to other users (mode&0o007 != 0): its error matches
// ErrExposed and says to chmod 600. Group permissions are allowed, for a
// token shared with a group (a Kubernetes secret volume with defaultMode
// 0440).
func Read(path string) (string, error) {
	token, err := read(path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	return token, nil
}

func read(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return "", fmt.Errorf("%w (mode %#o); chmod 600 it (a Kubernetes secret volume: set defaultMode to 0400 or 0440)", ErrExposed, perm)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", errors.New("file is empty")
	}
	return token, nil
}
