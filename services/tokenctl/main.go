// Command tokenctl is the ServiceAccount and token controller: every
// namespace gets a "default" ServiceAccount, and every ServiceAccount
// token Secret is filled with a signed token (or deleted once its account
// is gone). Like every kplane controller it is its own leader-elected
// process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/tokenctl/tokens"
)

func main() { app.Main(tokens.NewService()) }
