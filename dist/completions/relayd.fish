# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_relayd_global_optspecs
    string join \n h/help V/version
end

function __fish_relayd_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_relayd_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_relayd_using_subcommand
    set -l cmd (__fish_relayd_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c relayd -n "__fish_relayd_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_needs_command" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "run" -d 'Run the daemon in the foreground (SIGHUP reloads, SIGINT/SIGTERM stop)'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "check" -d 'Check a configuration: exit 0 if valid, 2 with errors naming file, line and field'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "rules" -d 'Print the iptables-restore input `run` would install'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "status" -d 'Show the running daemon\'s counters'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "replay" -d 'Run a queue\'s chain over a capture file, offline and unprivileged (like `suricata -r`)'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "keygen" -d 'Write a fresh random key for an ESP cipher to a new file (mode 0600)'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "cleanup" -d 'Remove every rule relayd owns (after a crash)'
complete -c relayd -n "__fish_relayd_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c relayd -n "__fish_relayd_using_subcommand run" -s c -l config -d 'Configuration file, e.g. /etc/relayd/relayd.toml' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand run" -l log -d 'Log filter (tracing syntax, e.g. "info" or "relayd::dump=warn,info"); RUST_LOG wins' -r
complete -c relayd -n "__fish_relayd_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand run" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand check" -s c -l config -d 'Configuration file' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand check" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand rules" -s c -l config -d 'Configuration file' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand rules" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand rules" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand status" -s s -l socket -d 'Status socket (default: from the configuration, else /run/relayd/relayd.sock)' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand status" -s c -l config -d 'Configuration file to take the socket path from' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand status" -l format -d 'Output format' -r -f -a "table\t'A table for people'
json\t'The status socket\'s JSON, pretty-printed'
prometheus\t'OpenMetrics/Prometheus text, as served on /metrics'"
complete -c relayd -n "__fish_relayd_using_subcommand status" -l json -d 'Print JSON instead of a table (the same as --format json)'
complete -c relayd -n "__fish_relayd_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand status" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand replay" -s c -l config -d 'Configuration file' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l pcap -d 'Capture to read (pcap or pcapng; Ethernet, Linux cooked, raw IP, BSD loopback, PPP or Cisco HDLC)' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l queue -d 'Queue whose chain runs (default: the first configured)' -r
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l write -d 'Write the packets that come out to this pcap (raw IP, original timestamps)' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l backlog-bytes -d 'Egress queue backlog adaptive services see, in bytes' -r
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l bandwidth -d 'Egress rate adaptive services see, e.g. "100mbit" (default: none)' -r
complete -c relayd -n "__fish_relayd_using_subcommand replay" -l json -d 'Print one JSON object per packet verdict (then the summary goes to stderr)'
complete -c relayd -n "__fish_relayd_using_subcommand replay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand replay" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand keygen" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand keygen" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand cleanup" -s c -l config -d 'Configuration file to take the chain prefix and iptables flavour from' -r -F
complete -c relayd -n "__fish_relayd_using_subcommand cleanup" -l prefix -d 'Chain prefix (default RELAYD)' -r
complete -c relayd -n "__fish_relayd_using_subcommand cleanup" -l force -d 'Clean up even if a running relayd holds the prefix'
complete -c relayd -n "__fish_relayd_using_subcommand cleanup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c relayd -n "__fish_relayd_using_subcommand cleanup" -s V -l version -d 'Print version'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "run" -d 'Run the daemon in the foreground (SIGHUP reloads, SIGINT/SIGTERM stop)'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "check" -d 'Check a configuration: exit 0 if valid, 2 with errors naming file, line and field'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "rules" -d 'Print the iptables-restore input `run` would install'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "status" -d 'Show the running daemon\'s counters'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "replay" -d 'Run a queue\'s chain over a capture file, offline and unprivileged (like `suricata -r`)'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "keygen" -d 'Write a fresh random key for an ESP cipher to a new file (mode 0600)'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "cleanup" -d 'Remove every rule relayd owns (after a crash)'
complete -c relayd -n "__fish_relayd_using_subcommand help; and not __fish_seen_subcommand_from run check rules status replay keygen cleanup help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
