package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/platforms"
)

const (
	criImages  = "io.containerd.cri.v1.images"
	criRuntime = "io.containerd.cri.v1.runtime"
	// criGRPC is the CRI service itself; disabled, kubelet has no CRI.
	criGRPC = "io.containerd.grpc.v1.cri"
)

// criLocalPullKeys are the settings of [plugins.'io.containerd.cri.v1.images']
// with which containerd 2.2's CRI gives up the transfer service and pulls
// with the client's own pull (internal/cri/config CheckLocalImagePullConfigs),
// each with the value that does it.
var criLocalPullKeys = []struct {
	key  string
	set  func(v any) bool
	what string
}{
	{"use_local_image_pull", func(v any) bool { return v == true }, "use_local_image_pull = true"},
	{"disable_snapshot_annotations", func(v any) bool { return v == false }, "disable_snapshot_annotations = false"},
	{"discard_unpacked_layers", func(v any) bool { return v == true }, "discard_unpacked_layers = true"},
	{"image_pull_with_sync_fs", func(v any) bool { return v == true }, "image_pull_with_sync_fs = true"},
	{"max_concurrent_downloads", func(v any) bool { n, ok := v.(int64); return ok && n != 3 }, "max_concurrent_downloads other than 3"},
	{"registry", func(v any) bool {
		m, _ := v.(map[string]any)
		for _, k := range []string{"mirrors", "configs", "auths"} {
			if t, _ := m[k].(map[string]any); len(t) > 0 {
				return true
			}
		}
		return false
	}, "registry.mirrors, registry.configs or registry.auths"},
}

// cri checks how kubelet's pulls reach the plugin: which path CRI pulls
// through, and, through the transfer service, that every snapshotter CRI
// unpacks into has an unpack_config entry for this node's platform using
// the diff proxy diff ("" when there is none).
func (d *doctorRun) cri(cfg *containerdConfig, path, diff string) {
	const pullCheck, unpackCheck = "CRI pull path", "CRI unpack"
	if slices.Contains(cfg.DisabledPlugins, criGRPC) || slices.Contains(cfg.DisabledPlugins, criImages) {
		d.skip(pullCheck, "CRI is disabled")
		d.skip(unpackCheck, "CRI is disabled")
		return
	}
	var local []string
	for _, k := range criLocalPullKeys {
		if v := cfg.plugin(criImages, k.key); v != nil && k.set(v) {
			local = append(local, k.what)
		}
	}
	table := fmt.Sprintf("[plugins.'%s']", criImages)
	discarded := ""
	if discard, _ := cfg.plugin(criImages, "discard_unpacked_layers").(bool); discard {
		discarded = "; with discard_unpacked_layers this node also drops its reference to each layer once unpacked, so the shared root keeps it only while another node holds it, and the next node to pull the image downloads it again"
	}
	if len(local) > 0 {
		d.warning(pullCheck, fmt.Sprintf("%s %s: CRI pulls with containerd's local pull, not the transfer service: layers are unpacked by the diff service's default, and unpack_config is not used%s", table, strings.Join(local, ", "), discarded),
			fmt.Sprintf("to pull through the transfer service as deploy/containerd-config.toml expects, remove %s from %s of %s (registries go in hosts.toml, registry.config_path; max_concurrent_downloads in [plugins.'%s']); to keep the local pull, keep %q first in [plugins.'%s'] default",
				strings.Join(local, ", "), table, path, transferService, diff, diffService))
		d.skip(unpackCheck, "CRI pulls with the local pull")
		return
	}
	d.ok(pullCheck, "CRI pulls through the transfer service")
	if diff == "" {
		d.skip(unpackCheck, "no diff proxy plugin")
		return
	}

	// The snapshotters CRI unpacks into: its default, and any a runtime names.
	snapshotters := map[string]string{}
	def, _ := cfg.plugin(criImages, "snapshotter").(string)
	if def == "" {
		def = "overlayfs"
	}
	snapshotters[def] = table + " snapshotter"
	runtimes, _ := cfg.plugin(criRuntime, "containerd", "runtimes").(map[string]any)
	for name, r := range runtimes {
		if s, _ := r.(map[string]any)["snapshotter"].(string); s != "" {
			snapshotters[s] = fmt.Sprintf("runtime %s", name)
		}
	}
	node := platforms.DefaultSpec()
	unpack, _ := cfg.plugin(transferService, "unpack_config").([]any)
	if len(unpack) == 0 {
		d.skip(unpackCheck, "no unpack_config (see transfer unpack differ)")
		return
	}
	var missing []string
	for s, from := range snapshotters {
		found := false
		for _, e := range unpack {
			m, _ := e.(map[string]any)
			p, _ := m["platform"].(string)
			sn, _ := m["snapshotter"].(string)
			if pl, err := platforms.Parse(p); err == nil && platforms.Only(pl).Match(node) && sn == s {
				found = true
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%s (%s)", s, from))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		snap := strings.SplitN(missing[0], " ", 2)[0]
		d.problem(unpackCheck, fmt.Sprintf("no unpack_config entry for %s with snapshotter %s: the transfer service skips the unpack of CRI's pulls into it (\"Unpack configuration not supported, skipping\"), so %s does not apply their layers",
			platforms.Format(node), strings.Join(missing, ", "), diff),
			fmt.Sprintf("add to %s, one entry per snapshotter:\n  [[plugins.'%s'.unpack_config]]\n    platform = %q\n    snapshotter = %q\n    differ = %q", path, transferService, platforms.Format(node), snap, diff))
		return
	}
	d.ok(unpackCheck, "every snapshotter CRI uses has an unpack_config entry for %s", platforms.Format(node))
}
