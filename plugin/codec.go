package plugin

import (
	"fmt"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec used below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Content writes without a copy per message (docs/design.md §5.6).
//
// containerd's proxy client sends a blob as Write messages of up to 1 MiB
// (fetch's buffer) and waits for each answer. gRPC's proto codec copies
// each message into a pooled buffer and proto.Unmarshal then copies its
// data into a new 1 MiB slice: 256 MiB of garbage per 256 MiB layer, a GC
// cycle every few MiB on the daemon's small heap, each one spinning until
// the handler's SHA-256 of the previous chunk (assembly, not preemptible)
// ends. Measured with BenchmarkProxiedWrite: see docs/design.md
// §5.6.
//
// Here a Write stream's messages are unmarshalled with the data aliasing
// the pooled buffer (unmarshalWrite), which is returned to the pool when the handler asks
// for the next message or returns. containerd's contentserver hands the
// data to content.Writer.Write, which must not retain it (io.Writer), and
// keeps nothing of a request once it receives the next.

// heldMessage is what a Write stream receives from the codec: the
// message's bytes in one buffer, referenced (not copied) when gRPC
// received them in one, until Free.
type heldMessage struct{ buf mem.Buffer }

// codec is gRPC's proto codec, except that a heldMessage keeps the bytes.
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2("proto")} }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if h, ok := v.(*heldMessage); ok {
		h.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// aliasingWrites wraps a Write stream so that its requests alias the
// received bytes.
type aliasingWrites struct {
	grpc.ServerStream
	held mem.Buffer // the bytes of the last request; nil when none
}

func (s *aliasingWrites) RecvMsg(m any) error {
	s.release()
	req, ok := m.(*contentapi.WriteContentRequest)
	if !ok {
		return s.ServerStream.RecvMsg(m)
	}
	var h heldMessage
	if err := s.ServerStream.RecvMsg(&h); err != nil {
		return err
	}
	buf := h.buf
	if err := unmarshalWrite(buf.ReadOnlyData(), req); err != nil {
		buf.Free()
		return err
	}
	s.held = buf
	return nil
}

// release returns the last request's bytes to the pool.
func (s *aliasingWrites) release() {
	if s.held != nil {
		s.held.Free()
		s.held = nil
	}
}

// writeDataField is the number of WriteContentRequest's data field.
var writeDataField = (&contentapi.WriteContentRequest{}).ProtoReflect().Descriptor().Fields().ByName("data").Number()

// unmarshalWrite is proto.Unmarshal of a WriteContentRequest whose data
// aliases b (protobuf-go always copies bytes fields): the other fields,
// a few bytes, are unmarshalled by proto; the data is the last occurrence
// of its field, as proto would take it.
func unmarshalWrite(b []byte, req *contentapi.WriteContentRequest) error {
	var rest, data []byte
	for in := b; len(in) > 0; {
		num, typ, n := protowire.ConsumeTag(in)
		if n < 0 {
			return fmt.Errorf("unmarshal %T: %w", req, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, in[n:])
		if m < 0 {
			return fmt.Errorf("unmarshal %T: %w", req, protowire.ParseError(m))
		}
		if num == writeDataField && typ == protowire.BytesType {
			data, _ = protowire.ConsumeBytes(in[n : n+m])
		} else {
			rest = append(rest, in[:n+m]...)
		}
		in = in[n+m:]
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	if len(data) > 0 {
		req.Data = data
	}
	return nil
}

// aliasedWrites is a stream interceptor giving Write streams requests that
// alias the received bytes.
func aliasedWrites() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != writeMethod {
			return handler(srv, ss)
		}
		s := &aliasingWrites{ServerStream: ss}
		defer s.release()
		return handler(srv, s)
	}
}
