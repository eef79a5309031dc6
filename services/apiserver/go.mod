module github.com/kplane/kplane/services/apiserver

go 1.26.0

require (
	github.com/kplane/kplane/pkg v0.0.0
	github.com/kplane/kplane/proto v0.0.0
)

replace (
	github.com/kplane/kplane/pkg => ../../pkg
	github.com/kplane/kplane/proto => ../../proto
)
