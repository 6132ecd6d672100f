# bash completion for ckptfs(1) — installed as
# /usr/share/bash-completion/completions/ckptfs (loaded on first use).

# Paths: bash-completion's _filedir where loaded, else compgen.
_ckptfs_files()
{
    if declare -F _filedir >/dev/null; then
        _filedir "$@"
    elif [[ $1 == -d ]]; then
        COMPREPLY=($(compgen -d -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_ckptfs()
{
    # COMP_WORDS directly: works without the bash-completion package too
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cword=$COMP_CWORD
    local -a words=("${COMP_WORDS[@]}")
    local cmds="pack unpack verify stat mount help"
    local common="-h --help -V --version -q --quiet -v --verbose"
    if [[ $cword -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$cmds --version -V --help" -- "$cur"))
        return
    fi
    local cmd=${words[1]}
    case $prev in
        --format) COMPREPLY=($(compgen -W "k15 bytesplit archive" -- "$cur")); return ;;
        --progress) COMPREPLY=($(compgen -W "auto bar plain none" -- "$cur")); return ;;
        --jobs) return ;;
        --against) _ckptfs_files; return ;;
        -o)
            COMPREPLY=($(compgen -W "allow_other cache_size= threads= prefetch= prefetch_threads=
                read_ahead_kb= uid= gid= umask= fmask= dmask= file_mode= dir_mode= log= nonempty
                nommap drop_packed keep_packed stats noexec noatime ro" -- "${cur##*,}"))
            [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *= ]] && compopt -o nospace 2>/dev/null
            return ;;
    esac
    if [[ $cur == -* ]]; then
        local opts=$common
        case $cmd in
            pack) opts+=" --format --jobs --delete-source --force --progress --no-space-check --skip-bad --dry-run --json" ;;
            unpack) opts+=" --jobs --progress --no-space-check --json" ;;
            verify) opts+=" --against --jobs --progress --json" ;;
            stat) opts+=" --json" ;;
            mount) opts+=" -f -d -o" ;;
        esac
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        [[ ${COMPREPLY[0]} == *= ]] && compopt -o nospace 2>/dev/null
        return
    fi
    case $cmd in
        help) COMPREPLY=($(compgen -W "pack unpack verify stat mount" -- "$cur")) ;;
        pack|verify) _ckptfs_files ;;
        *) _ckptfs_files -d ;;
    esac
} &&
    complete -F _ckptfs ckptfs
