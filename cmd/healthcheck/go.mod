module github.com/kplane/kplane/cmd/healthcheck

go 1.26.0
