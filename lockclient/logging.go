package lockclient

import (
	"context"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// callFields are the log fields of one Lock or Unlock call. They ride in the
// context and become a log entry only when a line is written: building
// logrus entries up front cost a tenth of a lock cycle's allocations.
type callFields struct {
	typ        api.OperationType
	resourceID string
	requestID  string // Lock
	fence      uint64 // Unlock
}

type callFieldsKey struct{}

func withCallFields(ctx context.Context, f callFields) context.Context {
	return context.WithValue(ctx, callFieldsKey{}, &f)
}

// logger returns ctx's logger with the fields of the call ctx belongs to.
func logger(ctx context.Context) *log.Entry {
	e := log.G(ctx)
	f, ok := ctx.Value(callFieldsKey{}).(*callFields)
	if !ok {
		return e
	}
	fields := log.Fields{"key": string(f.typ) + ":" + f.resourceID}
	if f.requestID != "" {
		fields["request_id"] = f.requestID
	}
	if f.fence != 0 {
		fields["fence"] = f.fence
	}
	return e.WithFields(fields)
}

// debugEnabled reports whether ctx's logger writes debug lines, so that a
// hot path builds them only then. log.G copies the default logger's entry
// when ctx carries none, so the default level is checked first: the
// loggers of containerd and of this module derive from it and share its
// level.
func debugEnabled(ctx context.Context) bool {
	return log.GetLevel() >= log.DebugLevel && log.G(ctx).Logger.IsLevelEnabled(log.DebugLevel)
}

// call names an operation of the client for its errors and logs, as "op
// type:resource" or "op resource"; the string is made only when one is
// written.
type call struct {
	op  string
	typ api.OperationType // empty for operations on a resource of any type
	id  string
}

func (c call) String() string {
	switch {
	case c.id == "":
		return c.op
	case c.typ == "":
		return c.op + " " + c.id
	}
	return c.op + " " + string(c.typ) + ":" + c.id
}
