(* Host pages; see host_pages.mli. *)

type t = (char, Bigarray.int8_unsigned_elt, Bigarray.c_layout) Bigarray.Array1.t

(* The start address of the mapping of file [path] in /proc/self/maps. *)
let find_mapping path =
  let ic = open_in "/proc/self/maps" in
  let rec scan () =
    match input_line ic with
    | exception End_of_file -> None
    | line -> (
        let fields = List.filter (( <> ) "") (String.split_on_char ' ' line) in
        match fields with
        | range :: _ :: _ :: _ :: _ :: rest when String.concat " " rest = path -> (
            match String.index_opt range '-' with
            | Some i -> Some (Nativeint.of_string ("0x" ^ String.sub range 0 i))
            | None -> scan ())
        | _ -> scan ())
  in
  Fun.protect ~finally:(fun () -> close_in_noerr ic) scan

let alloc size =
  let path = Filename.temp_file "rig-pages-" ".pages" in
  let real = try Unix.realpath path with _ -> path in
  Fun.protect ~finally:(fun () -> try Sys.remove path with Sys_error _ -> ())
    (fun () ->
      let fd = Unix.openfile path [ Unix.O_RDWR ] 0o600 in
      let pages =
        Fun.protect ~finally:(fun () -> Unix.close fd) (fun () ->
            Unix.ftruncate fd size;
            Bigarray.array1_of_genarray (Unix.map_file fd Bigarray.char Bigarray.c_layout true [| size |]))
      in
      match find_mapping real with
      | Some addr -> (addr, pages)
      | None -> failwith "cannot find the address of mapped host pages in /proc/self/maps")
