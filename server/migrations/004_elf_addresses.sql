-- Frames' addresses as their ELF files state them: what separate debug files are looked up by
-- when the server names frames agents sent as (build id, offset).

ALTER TABLE stacks
    ADD COLUMN elf_addresses Array(UInt64);
