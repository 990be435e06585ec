# bash completion for nhctl: its commands, their subcommands, its options, and files where a file is read.
_nhctl() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    fi
    local commands="health send cancel outcome installations user keys hub job config pns"
    local options="--config --connection-string --hub --json --timeout --help --version"
    case "$prev" in
        --config|--key-file|--service-account|--secret-file|--rich)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --platform)
            COMPREPLY=($(compgen -W "apns fcmv1 gcm wns adm baidu browser" -- "$cur")); return ;;
    esac
    local command="" i
    for ((i = 1; i < cword; i++)); do
        case "${words[i]}" in
            --config|--connection-string|--timeout|--hub) ((i++)) ;;
            -*) ;;
            *) command="${words[i]}"; break ;;
        esac
    done
    local subcommands=""
    case "$command" in
        "") COMPREPLY=($(compgen -W "$commands $options" -- "$cur")); return ;;
        installations) subcommands="list show delete" ;;
        user) subcommands="credential post list" ;;
        pns) subcommands="show set remove" ;;
        hub) subcommands="list create delete keys policy regenerate limits" ;;
        job) subcommands="import export list show" ;;
        health) options="$options --agent" ;;
        config) options="$options --defaults" ;;
        send) options="$options --tag --installation --user --ttl --native --platform --headers --idempotency-key --encrypted-for --test
                       --rich --message --rich-type --content-type --schedule --direct" ;;
    esac
    if [[ -n "$subcommands" && $((i + 1)) -eq $cword ]]; then
        COMPREPLY=($(compgen -W "$subcommands" -- "$cur")); return
    fi
    if [[ "$command" == pns && ( "${words[i+1]}" == set || "${words[i+1]}" == remove ) && $((i + 2)) -eq $cword ]]; then
        COMPREPLY=($(compgen -W "apple fcm browser wns adm baidu" -- "$cur")); return
    fi
    case "$command/${words[i+1]}" in
        pns/set) options="$options --key-file --key-id --team-id --bundle-id --endpoint --service-account --subject
                          --package-sid --tenant-id --client-id --secret-file --token-endpoint --api-key" ;;
        user/post) options="$options --app-id --title --body --raw --expires-in --priority --group" ;;
        user/credential) options="$options --lifetime" ;;
        installations/list) options="$options --tag --channel --top" ;;
        hub/delete) options="$options --yes" ;;
        hub/limits) options="$options --requests --sends --installations" ;;
        job/import) options="$options --mode --output --no-wait" ;;
        job/export) options="$options --no-wait" ;;
        job/show) options="$options --wait" ;;
    esac
    [[ "$cur" == -* ]] && COMPREPLY=($(compgen -W "$options" -- "$cur"))
}
complete -F _nhctl nhctl
