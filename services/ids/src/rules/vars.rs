//! Suricata's default rule variables, as its suricata.yaml ships them (`vars:
//! address-groups` and `port-groups`), so that a ruleset written for Suricata (Emerging
//! Threats, its own test rules) loads with the addresses and ports it expects.

/// Suricata 7's default `vars` (suricata.yaml): address groups, then port groups. The
/// `rulecheck` and `offload_check` examples load public rulesets with them.
pub const SURICATA_VARS: &[(&str, &str)] = &[
    ("HOME_NET", "[192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]"),
    ("EXTERNAL_NET", "!$HOME_NET"),
    ("HTTP_SERVERS", "$HOME_NET"),
    ("SMTP_SERVERS", "$HOME_NET"),
    ("SQL_SERVERS", "$HOME_NET"),
    ("DNS_SERVERS", "$HOME_NET"),
    ("TELNET_SERVERS", "$HOME_NET"),
    ("AIM_SERVERS", "$EXTERNAL_NET"),
    ("DC_SERVERS", "$HOME_NET"),
    ("DNP3_SERVER", "$HOME_NET"),
    ("DNP3_CLIENT", "$HOME_NET"),
    ("MODBUS_CLIENT", "$HOME_NET"),
    ("MODBUS_SERVER", "$HOME_NET"),
    ("ENIP_CLIENT", "$HOME_NET"),
    ("ENIP_SERVER", "$HOME_NET"),
    ("HTTP_PORTS", "80"),
    ("SHELLCODE_PORTS", "!80"),
    ("ORACLE_PORTS", "1521"),
    ("SSH_PORTS", "22"),
    ("DNP3_PORTS", "20000"),
    ("MODBUS_PORTS", "502"),
    ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
    ("FTP_PORTS", "21"),
    ("GENEVE_PORTS", "6081"),
    ("VXLAN_PORTS", "4789"),
    ("TEREDO_PORTS", "3544"),
];
