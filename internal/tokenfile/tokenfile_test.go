package tokenfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
	require.NoError(t, os.Chmod(path, mode)) // past the umask
	return path
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
		exposed       bool
		err           string
	}{
		{name: "trimmed", content: "  s3cret\n", mode: 0o600, want: "s3cret"},
		{name: "group may read", content: "s3cret", mode: 0o440, want: "s3cret"},
		{name: "others may read", content: "s3cret", mode: 0o644, exposed: true, err: "chmod 600"},
		{name: "others may write", content: "s3cret", mode: 0o602, exposed: true, err: "mode 0602"},
		{name: "empty", content: " \n", mode: 0o600, err: "file is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.content, tc.mode)
			got, err := Read(path)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, path, "the error names the file")
			require.Equal(t, tc.exposed, errors.Is(err, ErrExposed))
			require.Empty(t, got)
		})
	}
	_, err := Read(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestReadNodes(t *testing.T) {
	got, err := ReadNodes(writeFile(t, "# node tokens\nnode-a tok-a\n\n  node-b   tok-b  \n", 0o600))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"tok-a": "node-a", "tok-b": "node-b"}, got)

	for _, tc := range []struct{ name, content, err string }{
		{"a token twice", "node-a tok\nnode-b tok\n", "line 2: a token is given twice"},
		{"not a pair", "node-a\n", "line 1: want \"NODE_ID TOKEN\", got 1 field(s)"},
		{"three fields", "node-a tok extra\n", "got 3 field(s)"},
		{"only comments", "# nobody\n\n", "no node tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.content, 0o600)
			_, err := ReadNodes(path)
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, "node token file "+path)
		})
	}
	_, err = ReadNodes(writeFile(t, "node-a tok\n", 0o604))
	require.ErrorIs(t, err, ErrExposed)
}
