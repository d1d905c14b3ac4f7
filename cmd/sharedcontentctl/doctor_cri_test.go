package main

import (
	"path/filepath"
	"testing"

	"github.com/containerd/platforms"
	"github.com/stretchr/testify/require"
)

// TestDoctorCRI: the settings with which containerd 2.2's CRI leaves the
// transfer service for the local pull each get a warning naming them (the
// local pull works, through the diff service's default, but unpack_config
// no longer applies), and a snapshotter CRI unpacks into with no
// unpack_config entry for this node's platform is a problem; the deploy
// config pulls through the transfer service, with an entry for overlayfs.
func TestDoctorCRI(t *testing.T) {
	n := newNode(t)
	good := deployConfig(t, n.socket)
	if platforms.Format(platforms.DefaultSpec()) != "linux/amd64" {
		t.Skip("deploy/containerd-config.toml unpacks linux/amd64")
	}
	const images = "\n[plugins.'io.containerd.cri.v1.images']\n"
	for _, tc := range []struct {
		name    string
		extra   string
		pull    string // the pull path's result
		unpack  string // the unpack check's result
		message string // in the message of the check that is not ok
		fix     string // in its fix
	}{{
		name: "deploy config", pull: checkOK, unpack: checkOK,
	}, {
		name:  "use_local_image_pull",
		extra: images + "  use_local_image_pull = true\n",
		pull:  checkWarning, unpack: checkSkipped,
		message: "use_local_image_pull = true: CRI pulls with containerd's local pull",
		fix:     `keep "sharedcontent-diff" first in [plugins.'io.containerd.service.v1.diff-service'] default`,
	}, {
		name:  "snapshot annotations",
		extra: images + "  disable_snapshot_annotations = false\n",
		pull:  checkWarning, unpack: checkSkipped,
		message: "disable_snapshot_annotations = false",
		fix:     "remove disable_snapshot_annotations = false",
	}, {
		name:  "discarded layers",
		extra: images + "  discard_unpacked_layers = true\n",
		pull:  checkWarning, unpack: checkSkipped,
		message: "downloads it again",
		fix:     "remove discard_unpacked_layers = true",
	}, {
		name:  "registry mirrors",
		extra: images + "  [plugins.'io.containerd.cri.v1.images'.registry.mirrors.'docker.io']\n    endpoint = [\"http://mirror:5000\"]\n",
		pull:  checkWarning, unpack: checkSkipped,
		message: "registry.mirrors",
		fix:     "registries go in hosts.toml",
	}, {
		name:  "max concurrent downloads",
		extra: images + "  max_concurrent_downloads = 8\n",
		pull:  checkWarning, unpack: checkSkipped,
		message: "max_concurrent_downloads other than 3",
		fix:     "max_concurrent_downloads in [plugins.'io.containerd.transfer.v1.local']",
	}, {
		name:  "default max concurrent downloads",
		extra: images + "  max_concurrent_downloads = 3\n  disable_snapshot_annotations = true\n  use_local_image_pull = false\n",
		pull:  checkOK, unpack: checkOK,
	}, {
		name:  "CRI snapshotter without an entry",
		extra: images + "  snapshotter = \"native\"\n",
		pull:  checkOK, unpack: checkProblem,
		message: "no unpack_config entry for linux/amd64 with snapshotter native ([plugins.'io.containerd.cri.v1.images'] snapshotter)",
		fix:     "platform = \"linux/amd64\"\n    snapshotter = \"native\"\n    differ = \"sharedcontent-diff\"",
	}, {
		name:  "runtime snapshotter without an entry",
		extra: "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.kata]\n  runtime_type = \"io.containerd.kata.v2\"\n  snapshotter = \"devmapper\"\n",
		pull:  checkOK, unpack: checkProblem,
		message: "snapshotter devmapper (runtime kata)",
		fix:     `snapshotter = "devmapper"`,
	}, {
		name:  "CRI disabled",
		extra: "\n",
		pull:  checkSkipped, unpack: checkSkipped,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			config := good + tc.extra
			if tc.name == "CRI disabled" {
				config = without(t, good, `disabled_plugins = ["io.containerd.content.v1.content"]`)
				config = "disabled_plugins = [\"io.containerd.content.v1.content\", \"io.containerd.grpc.v1.cri\"]\n" + config
			}
			path := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), config)
			results, problems, err := n.doctor(t, path)
			pull, unpack := results["CRI pull path"], results["CRI unpack"]
			require.Equal(t, tc.pull, pull.Result, "%+v", pull)
			require.Equal(t, tc.unpack, unpack.Result, "%+v", unpack)
			notOK := pull
			if tc.unpack == checkProblem {
				notOK = unpack
				require.Equal(t, []string{"CRI unpack"}, problems)
				require.EqualError(t, err, "1 problem")
				require.Contains(t, notOK.Fix, path, "the fix names the file")
			} else {
				require.Empty(t, problems, "a warning does not fail doctor")
				require.NoError(t, err)
			}
			require.Contains(t, notOK.Message, tc.message)
			require.Contains(t, notOK.Fix, tc.fix)
		})
	}
}
