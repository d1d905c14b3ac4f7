package cli

import (
	"github.com/sirupsen/logrus"
)

// fsverityCheck is the warning containerd's local content store logs when
// it opens a directory on a file system without fs-verity (most of them,
// and every shared one): it then just does not use fs-verity, which
// sharedcontent does not either, so the warning alarms for nothing.
const fsverityCheck = "failed check for fsverity support"

// quietFormatter writes fsverityCheck at debug level (and so not at all
// at the default level, info); every other entry goes to next unchanged.
// containerd logs it on its global logger, not on a context's, so a
// filter on that logger is the one place to catch it.
type quietFormatter struct{ next logrus.Formatter }

func (q quietFormatter) Format(e *logrus.Entry) ([]byte, error) {
	if e.Message != fsverityCheck || e.Level != logrus.WarnLevel {
		return q.next.Format(e)
	}
	if e.Logger == nil || !e.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return nil, nil
	}
	d := *e
	d.Level = logrus.DebugLevel
	return q.next.Format(&d)
}
