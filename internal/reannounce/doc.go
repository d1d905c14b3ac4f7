// Package reannounce makes containerd's CRI see again the images whose
// content it could not read.
//
// CRI loads containerd's images into its cache once, when containerd
// starts, reading each image's content; an image whose content could not be
// read then (the content plugin was down) stays out of the cache, so out of
// kubelet's sight, until an /images/create or /images/update event names
// it. Run connects to containerd's API socket and, each time containerd
// becomes reachable (the plugin started, containerd restarted), publishes
// an /images/update event for every image, so that CRI reloads them all.
// See docs/design.md §6.1.
package reannounce
