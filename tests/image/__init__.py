"""The container image, tested from outside by `make image-test` (not by `make test`)."""
