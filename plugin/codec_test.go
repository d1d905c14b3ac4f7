package plugin

import (
	"testing"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestUnmarshalWriteIsProtoUnmarshal checks that unmarshalWrite reads
// what proto.Unmarshal reads, with the data aliasing the input.
func TestUnmarshalWriteIsProtoUnmarshal(t *testing.T) {
	for name, req := range map[string]*contentapi.WriteContentRequest{
		"stat":   {Action: contentapi.WriteAction_STAT, Ref: "default/1/layer-sha256:ab", Total: 42, Expected: "sha256:ab"},
		"write":  {Action: contentapi.WriteAction_WRITE, Offset: 1 << 20, Data: []byte("some data")},
		"commit": {Action: contentapi.WriteAction_COMMIT, Total: 9, Offset: 9, Expected: "sha256:cd", Labels: map[string]string{"a": "b", "c": ""}},
		"empty":  {},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(req)
			require.NoError(t, err)
			var want, got contentapi.WriteContentRequest
			require.NoError(t, proto.Unmarshal(b, &want))
			got.Ref = "left over from a previous message"
			require.NoError(t, unmarshalWrite(b, &got))
			require.True(t, proto.Equal(&want, &got), "got %v, want %v", &got, &want)
			if len(req.Data) > 0 {
				b[len(b)-1] ^= 0xff
				require.NotEqual(t, want.Data, got.Data, "data aliases the input")
			}
		})
	}

	t.Run("last data wins", func(t *testing.T) {
		b, err := proto.Marshal(&contentapi.WriteContentRequest{Data: []byte("first")})
		require.NoError(t, err)
		b = protowire.AppendTag(b, writeDataField, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("second"))
		var want, got contentapi.WriteContentRequest
		require.NoError(t, proto.Unmarshal(b, &want))
		require.NoError(t, unmarshalWrite(b, &got))
		require.Equal(t, want.Data, got.Data)
	})

	t.Run("truncated", func(t *testing.T) {
		b, err := proto.Marshal(&contentapi.WriteContentRequest{Data: []byte("data")})
		require.NoError(t, err)
		require.Error(t, unmarshalWrite(b[:len(b)-1], &contentapi.WriteContentRequest{}))
	})
}
