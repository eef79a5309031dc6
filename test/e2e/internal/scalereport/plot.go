package scalereport

import (
	"fmt"
	"image/color"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot writes a PNG to path: Running pods over time on top, the RSS of
// every process (MiB) below, sharing the time axis. It is drawn at 72
// dpi and small (a few tens of KiB) so the repository can keep it.
func Plot(path, title string, samples []Sample) error {
	if len(samples) == 0 {
		return fmt.Errorf("plot %s: no samples", path)
	}
	running := make(plotter.XYs, len(samples))
	var names []string
	for i, s := range samples {
		running[i] = plotter.XY{X: s.At.Seconds(), Y: float64(s.Running)}
		for n := range s.RSS {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)

	top := plot.New()
	top.Title.Text = title
	top.Y.Label.Text = "pods Running"
	top.X.Label.Text = "seconds since the ReplicaSet was created"
	l, err := plotter.NewLine(running)
	if err != nil {
		return fmt.Errorf("plot running pods: %w", err)
	}
	l.Color = color.RGBA{B: 200, A: 255}
	l.Width = vg.Points(1.5)
	top.Add(l, plotter.NewGrid())

	bottom := plot.New()
	bottom.Y.Label.Text = "RSS (MiB)"
	bottom.X.Label.Text = "seconds since the ReplicaSet was created"
	bottom.Add(plotter.NewGrid())
	bottom.Legend.Top, bottom.Legend.Left = true, true
	for i, n := range names {
		pts := make(plotter.XYs, 0, len(samples))
		for _, s := range samples {
			if v, ok := s.RSS[n]; ok {
				pts = append(pts, plotter.XY{X: s.At.Seconds(), Y: float64(v) / (1 << 20)})
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot RSS of %s: %w", n, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		line.Width = vg.Points(1.2)
		bottom.Add(line)
		bottom.Legend.Add(n, line)
	}

	img := vgimg.NewWith(vgimg.UseWH(9*vg.Inch, 7*vg.Inch), vgimg.UseDPI(72))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close() // the write error is the one to report
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
