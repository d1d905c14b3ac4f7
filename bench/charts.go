package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart file names under the output directory.
const (
	chartBytes = "bench-dedup-bytes.png"
	chartWall  = "bench-dedup-wall.png"
)

var setupColors = map[string]color.Color{
	"sharedcontent": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"uncoordinated": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// writeCharts renders registry bytes and wall time against the node count
// for both setups.
func writeCharts(dir string, res []dedupResult, imageBytes int64) error {
	var counts []float64
	for _, r := range res {
		if r.Setup == "sharedcontent" {
			counts = append(counts, float64(r.Nodes))
		}
	}
	bytesOf := func(r dedupResult) float64 { return float64(r.Bytes) / (1 << 20) }
	wallOf := func(r dedupResult) float64 { return r.Wall.Seconds() }

	limit := make(plotter.XYs, len(counts))
	for i, n := range counts {
		limit[i] = plotter.XY{X: n, Y: float64(imageBytes) / (1 << 20)}
	}
	if err := chart(filepath.Join(dir, chartBytes),
		fmt.Sprintf("Registry bytes: %.0f MiB image pulled by N nodes", float64(imageBytes)/(1<<20)),
		"registry bytes sent (MiB)", res, bytesOf, limit, "1× the image (the limit)"); err != nil {
		return err
	}
	var single float64
	for _, r := range res {
		if r.Setup == "sharedcontent" && r.Nodes == 1 {
			single = r.Wall.Seconds()
		}
	}
	target := make(plotter.XYs, len(counts))
	for i, n := range counts {
		target[i] = plotter.XY{X: n, Y: targetWallN8VsN1 * single}
	}
	return chart(filepath.Join(dir, chartWall),
		"Wall time until every node has the image",
		"seconds", res, wallOf, target, fmt.Sprintf("target: %.1f× sharedcontent at N=1", targetWallN8VsN1))
}

func chart(path, title, ylabel string, res []dedupResult, y func(dedupResult) float64, ref plotter.XYs, refLabel string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "nodes pulling at once (N)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var ticks []plot.Tick
	for _, setup := range []string{"sharedcontent", "uncoordinated"} {
		var xys plotter.XYs
		for _, r := range res {
			if r.Setup == setup {
				xys = append(xys, plotter.XY{X: float64(r.Nodes), Y: y(r)})
				if setup == "sharedcontent" {
					ticks = append(ticks, plot.Tick{Value: float64(r.Nodes), Label: fmt.Sprint(r.Nodes)})
				}
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color = setupColors[setup]
		line.Width = vg.Points(2)
		points.Color = setupColors[setup]
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(setup, line, points)
	}
	if len(ref) > 0 {
		l, err := plotter.NewLine(ref)
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 0x60}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(refLabel, l)
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}
