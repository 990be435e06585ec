# bash completion for nh-agent: its commands and options.
_nh_agent() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    fi
    local commands="run subscribe unsubscribe categories id login list history keys pair read dismiss activate snooze delete health apps help"
    if [[ "$prev" == --config ]]; then
        COMPREPLY=($(compgen -f -- "$cur")); return
    fi
    if [[ $cword -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$commands --config --check-config --version --help" -- "$cur")); return
    fi
    if [[ "${words[1]}" == apps && $cword -eq 2 ]]; then
        COMPREPLY=($(compgen -W "remove" -- "$cur")); return
    fi
    if [[ "${words[1]}" == keys && $cword -eq 2 ]]; then
        COMPREPLY=($(compgen -W "init rotate recover" -- "$cur")); return
    fi
    if [[ "${words[1]}" == pair && $cword -eq 2 ]]; then
        COMPREPLY=($(compgen -W "accept" -- "$cur")); return
    fi
    if [[ "$prev" == --plaintext ]]; then
        COMPREPLY=($(compgen -W "refuse accept" -- "$cur")); return
    fi
    if [[ "${words[1]}" == keys ]]; then
        COMPREPLY=($(compgen -W "--revoke --plaintext" -- "$cur")); return
    fi
    [[ "$cur" == -* ]] && COMPREPLY=($(compgen -W "--config --help" -- "$cur"))
}
complete -F _nh_agent nh-agent
