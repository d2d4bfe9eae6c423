module ultraplane.dev/kind/runc-shim

go 1.22
