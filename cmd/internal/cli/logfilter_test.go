package cli

import (
	"errors"
	"testing"

	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
)

// captureLog sends containerd/log's global logger to a buffer, configured
// by SetLogLevel(level), until the test ends.
func captureLog(t *testing.T, level string) *logbuf.Buffer {
	t.Helper()
	buf := logbuf.Capture(t)
	require.NoError(t, SetLogLevel(level))
	return buf
}

func TestQuietFormatter(t *testing.T) {
	buf := captureLog(t, "info")
	log.L.WithError(errors.New("operation not supported")).WithField("path", "/x").Warn(fsverityCheck)
	require.Empty(t, buf.String(), "the fsverity check's warning is dropped at info")
	log.L.Warn("another warning")
	require.Contains(t, buf.String(), "another warning", "other warnings stay")

	buf = captureLog(t, "debug")
	log.L.WithError(errors.New("operation not supported")).Warn(fsverityCheck)
	require.Contains(t, buf.String(), "level=debug msg=\""+fsverityCheck+"\"", "written at debug level when debug is on")
	require.Equal(t, logrus.DebugLevel, log.L.Logger.GetLevel())
}
