# The azlease command as a container image: the static binary from
# 'make build' on an empty base, with no shell and no package manager, run as
# a user that is not root. Build it with
#
#	make image                       # this machine's architecture: azlease:dev
#	make image IMAGE_ARCH=arm64 IMAGE=azlease:arm64
#
# TARGETOS and TARGETARCH (linux; amd64, arm64) come from --platform and pick
# the binary; TARGETPLATFORM, which podman sets too, is declared so that it
# does not warn about an argument left unused (one name per ARG: podman 4.3
# does not take several on one line). Nothing is fetched: FROM scratch needs
# no registry.
FROM scratch
ARG TARGETOS
ARG TARGETARCH
ARG TARGETPLATFORM
# Root certificates for https to Azure (Go reads this path on Linux): the
# build machine's bundle, which 'make build' copies into dist/.
COPY dist/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY dist/azlease-${TARGETOS}-${TARGETARCH} /azlease
# A numeric user and group (there is no /etc/passwd): 65532 is "nonroot" in
# distroless images. azlease writes no files.
USER 65532:65532
ENTRYPOINT ["/azlease"]
