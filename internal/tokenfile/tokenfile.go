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

// ReadNodes returns the node tokens in the file at path, token → node
// ID: one "NODE_ID TOKEN" pair per line; blank lines and lines starting
// with # are skipped. The mode rule is Read's. A token given twice, or a
// line that is not a pair, is an error.
func ReadNodes(path string) (map[string]string, error) {
	text, err := readAll(path)
	if err == nil {
		var nodes map[string]string
		if nodes, err = parseNodes(text); err == nil {
			return nodes, nil
		}
	}
	return nil, fmt.Errorf("node token file %s: %w", path, err)
}

func parseNodes(text string) (map[string]string, error) {
	nodes := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"NODE_ID TOKEN\", got %d field(s)", i+1, len(f))
		}
		if _, dup := nodes[f[1]]; dup {
			return nil, fmt.Errorf("line %d: a token is given twice", i+1)
		}
		nodes[f[1]] = f[0]
	}
	if len(nodes) == 0 {
		return nil, errors.New("no node tokens")
	}
	return nodes, nil
}

// readAll returns the content of the token file at path, after checking
// its mode.
func readAll(path string) (string, error) {
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
	return string(b), err
}

func read(path string) (string, error) {
	b, err := readAll(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(b)
	if token == "" {
		return "", errors.New("file is empty")
	}
	return token, nil
}
