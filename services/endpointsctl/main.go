// Command endpointsctl is the endpoints controller: for every Service
// with a selector it keeps an Endpoints object of the same name listing
// the ready (and not ready) addresses of the pods the Service selects,
// with their ports resolved from the Service's target ports. Like every
// kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/endpointsctl/endpoints"
)

func main() { app.Main(endpoints.NewService()) }
