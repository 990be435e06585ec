#!/bin/sh
# Builds the Debian packages from the static executables (make static):
#   notification-hub  the services and nhctl (one executable, nh-services, and a link per name), the
#                     web pages, the units, the nh user (sysusers.d), /var/lib/nh (tmpfiles.d),
#                     /etc/nh/hub.json;
#   nh-agent          the agent, its system unit (headless hosts) and user unit (desktop sessions),
#                     /etc/nh/agent.json.
# Usage: deploy/debian/build-deb.sh OUTPUT_FOLDER (make deb). Depends comes from dpkg-shlibdeps.
set -eu
out=$1
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
version=$(sed -n 's/^ *public static let current = "\(.*\)"$/\1/p' Modules/ServiceKit/ServiceContext.swift)
[ -n "$version" ] || { echo "build-deb.sh: no version in Modules/ServiceKit/ServiceContext.swift" >&2; exit 1; }
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-"Notification hub maintainers <maintainers@notification-hub.example.org>"}
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# The packages are the same for the same commit: file times and the changelog's date are the commit's.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

stage="$out/stage"
rm -rf "$stage"
mkdir -p "$out"
layout="PREFIX=/usr UNITDIR=/lib/systemd/system USERUNITDIR=/usr/lib/systemd/user SYSUSERSDIR=/usr/lib/sysusers.d TMPFILESDIR=/usr/lib/tmpfiles.d"
# shellcheck disable=SC2086
make --no-print-directory -s INSTALL_NEEDS= install-services DESTDIR="$stage/notification-hub" $layout
# shellcheck disable=SC2086
make --no-print-directory -s INSTALL_NEEDS= install-agent DESTDIR="$stage/nh-agent" $layout

for package in notification-hub nh-agent; do
    root="$stage/$package"
    case $package in
        notification-hub)
            summary="self-hosted notification hub: the services and nhctl"
            description=" The registration service, publish service, dispatcher, sync store and HTTP
 gateway of a self-hosted notification hub (the Notification Hubs REST API, tag
 and template broadcast, rich push, per-user notifications synced across
 devices, push to APNs, FCM, browsers and UnifiedPush apps), and nhctl to
 operate it. They talk over ZeroMQ with CURVE, and keep their state in SQLite
 files in /var/lib/nh or in PostgreSQL.
 .
 Installing starts nothing: enable the units of the services this host runs."
            recommends="ca-certificates" ;;
        nh-agent)
            summary="self-hosted notification hub: the client agent"
            description=" The agent a Linux host runs to receive a notification hub's notifications:
 it registers the host, shows notifications as desktop popups, syncs their read
 and dismiss state across a user's devices, and is a UnifiedPush distributor
 for apps.
 .
 A system unit serves headless hosts, and a user unit desktop sessions."
            recommends="" ;;
    esac
    doc="$root/usr/share/doc/$package"
    install -d "$doc" "$root/DEBIAN"
    install -m 0644 deploy/debian/copyright "$doc/copyright"
    printf '%s (%s) unstable; urgency=medium\n\n  * Release %s, built from commit %s.\n\n -- %s  %s\n' \
        "$package" "$version" "$version" "$commit" "$maintainer" "$(date -R -u -d "@$SOURCE_DATE_EPOCH")" |
        gzip -9n > "$doc/changelog.gz"
    chmod 0644 "$doc/changelog.gz"

    # Depends: the Debian packages whose libraries the executables load, with their versions.
    shlibs=$(mktemp -d)
    mkdir "$shlibs/debian"
    printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$package" "$package" > "$shlibs/debian/control"
    executables=$(find "$root/usr/bin" -type f -perm -u+x)
    # shellcheck disable=SC2086
    depends=$(cd "$shlibs" && dpkg-shlibdeps -O $(for e in $executables; do printf -- '-e%s ' "$e"; done) 2>/dev/null |
        sed -n 's/^shlibs:Depends=//p')
    rm -rf "$shlibs"
    [ -n "$depends" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies for $package" >&2; exit 1; }

    for script in postinst prerm postrm; do
        install -m 0755 "deploy/debian/$package.$script" "$root/DEBIAN/$script"
    done
    (cd "$root" && find etc -type f | sed 's|^|/|' | sort) > "$root/DEBIAN/conffiles"
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort | xargs md5sum) > "$root/DEBIAN/md5sums"
    chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    {
        echo "Package: $package"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $maintainer"
        echo "Installed-Size: $size"
        echo "Depends: $depends"
        [ -z "$recommends" ] || echo "Recommends: $recommends"
        echo "Section: net"
        echo "Priority: optional"
        echo "Description: $summary"
        echo "$description"
    } > "$root/DEBIAN/control"
    find "$root" -type d -exec chmod 0755 {} +
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    dpkg-deb --root-owner-group -Zxz --build "$root" "$out/${package}_${version}_${arch}.deb" >/dev/null
    echo "$out/${package}_${version}_${arch}.deb"
done
