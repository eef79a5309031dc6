// Package app builds a scheduler binary, as kube-scheduler's
// cmd/kube-scheduler/app: NewService with the in-tree plugins, plus any
// plugins given with WithPlugin, which a --config profile can then
// enable by name. A custom scheduler is a main package of a few lines:
//
//	func main() {
//		kapp.Main(app.NewService(app.WithPlugin(myplugin.Name, myplugin.New)))
//	}
package app

import (
	kapp "github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/scheduler"
)

// Option changes how the scheduler is built.
type Option func(framework.Registry)

// WithPlugin registers an out-of-tree plugin under name. A name that an
// in-tree plugin already has makes the scheduler fail at start.
func WithPlugin(name string, factory framework.PluginFactory) Option {
	return func(r framework.Registry) { r[name] = factory }
}

// NewService returns the scheduler service (leader-elected, flags
// including --config) with the in-tree plugins and those of opts.
func NewService(opts ...Option) kapp.Service {
	r := framework.Registry{}
	for _, o := range opts {
		o(r)
	}
	return scheduler.NewService(r)
}
