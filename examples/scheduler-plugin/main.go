// Command scheduler-plugin is kplane's scheduler with one plugin of its
// own, NodeLabelPreference (package nodelabel), registered with
// app.WithPlugin. Enable it in a profile with --config, e.g.:
//
//	apiVersion: kubescheduler.config.k8s.io/v1
//	kind: KubeSchedulerConfiguration
//	profiles:
//	- schedulerName: ssd-scheduler
//	  plugins:
//	    multiPoint:
//	      enabled:
//	      - name: NodeLabelPreference
//	        weight: 10
//	  pluginConfig:
//	  - name: NodeLabelPreference
//	    args: {label: disktype, value: ssd}
//
// Pods with spec.schedulerName: ssd-scheduler then prefer ssd nodes.
package main

import (
	kapp "github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/scheduler/app"

	"github.com/kplane/kplane/examples/scheduler-plugin/nodelabel"
)

func main() { kapp.Main(app.NewService(app.WithPlugin(nodelabel.Name, nodelabel.New))) }
