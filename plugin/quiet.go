package plugin

import (
	"context"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// containerd's content server logs every failed Write at error level. A
// node that finds a blob being downloaded elsewhere answers Unavailable and
// containerd retries (16 ms doubling to 2 s), so a waiting node would log
// dozens of errors per layer for the protocol working as designed. The
// interceptor below gives Write streams a logger that reports those
// expected refusals at debug level; every other error stays an error.
//
// Likewise, when a follower's blob was committed by another node, the
// content server finds it at the commit, closes the writer and aborts its
// ref: a follower has no ingest to abort, and the NotFound it answers is
// the protocol working as designed (docs/design.md).

const (
	writeMethod = "/containerd.services.content.v1.Content/Write"
	writeFailed = "(*service).Write failed"
	abortFailed = "failed to abort write"
)

// quietFormatter drops the expected-refusal lines below debug level and
// marks them as debug otherwise.
type quietFormatter struct {
	logrus.Formatter
	logger *logrus.Logger
}

func (f quietFormatter) Format(e *logrus.Entry) ([]byte, error) {
	if e.Level != logrus.ErrorLevel {
		return f.Formatter.Format(e)
	}
	err, _ := e.Data[logrus.ErrorKey].(error)
	var quiet string
	switch {
	case err == nil:
	case e.Message == writeFailed && status.Code(err) == codes.Unavailable:
		quiet = "write refused: blob busy on another node; containerd retries"
	case e.Message == abortFailed && errdefs.IsNotFound(err):
		quiet = "nothing to abort: the blob was committed by another node"
	}
	if quiet != "" {
		if !f.logger.IsLevelEnabled(logrus.DebugLevel) {
			return nil, nil
		}
		e = e.Dup()
		e.Level = logrus.DebugLevel
		e.Message = quiet
	}
	return f.Formatter.Format(e)
}

// quietWrites is a stream interceptor giving Write streams the quiet logger.
func quietWrites() grpc.StreamServerInterceptor {
	base := log.L.Logger
	quiet := &logrus.Logger{
		Out:          base.Out,
		Hooks:        base.Hooks,
		Formatter:    quietFormatter{Formatter: base.Formatter, logger: base},
		ReportCaller: base.ReportCaller,
		Level:        base.Level,
		ExitFunc:     base.ExitFunc,
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != writeMethod {
			return handler(srv, ss)
		}
		quiet.SetLevel(base.GetLevel())
		ctx := log.WithLogger(ss.Context(), logrus.NewEntry(quiet).WithFields(log.G(ss.Context()).Data))
		return handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
	}
}

type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }
