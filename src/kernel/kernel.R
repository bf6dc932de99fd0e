# The R side of corral's R kernel: a read-eval-print loop run by
# src/kernel/r_kernel.py, which starts it as
#   R --no-save --no-restore --no-echo --quiet --file=kernel.R --args <plot dir>
# with fd 3 the read end of a command pipe and fd 4 the write end of a reply
# pipe; R's stdout and stderr are the kernel's own, which the host streams.
#
# Records on both pipes: a big-endian 32-bit count of fields, then each field as
# a big-endian 32-bit byte length and its UTF-8 bytes.  The first field is the
# record's kind.
#   host -> R:  exec <code> [<name> <value>]...    run a cell, with env for it
#               environ [<name> <"1" value | "0" "">]...  set / unset for good
#               warm                              load what a first cell needs
#   R -> host:  ready <R version> <tempdir()>
#               result <"1" main | "0"> [<mime> <text>]...
#               image <path of a PNG file>        (the host reads and removes it)
#               stream <stdout|stderr> <text>     (messages and warnings)
#               error <name> <value> <traceback>
#               done <ok|error>
# The host answers every R record but ready and done with one byte, once it has
# sent what R wrote to stdout and stderr before it.
# Everything but the user's code runs with interrupts suspended: a SIGINT that
# arrives there stays pending and is drained before the next cell starts.

local({
  cmd_con <- file("/dev/fd/3", "rb", raw = TRUE)
  reply_con <- file("/dev/fd/4", "wb", raw = TRUE)
  plot_dir <- commandArgs(trailingOnly = TRUE)[1]
  cell_number <- 0L
  # the call an error or warning signalled by top-level code carries
  eval_call <- quote(eval(corral..expr, .GlobalEnv))

  # --- records --------------------------------------------------------------

  be32 <- function(n) writeBin(as.integer(n), raw(), size = 4L, endian = "big")

  # writes a record; records that carry output wait for the host's one-byte
  # acknowledgement, so that what R wrote to stdout and stderr before them has
  # been streamed first, in order
  send <- function(...) {
    fields <- as.character(c(...))
    parts <- list(be32(length(fields)))
    for (f in fields) {
      bytes <- charToRaw(enc2utf8(f))
      parts[[length(parts) + 1L]] <- be32(length(bytes))
      parts[[length(parts) + 1L]] <- bytes
    }
    suspendInterrupts({
      writeBin(do.call(c, parts), reply_con)
      flush(reply_con)
      if (!fields[1L] %in% c("ready", "done")) {
        if (length(readBin(cmd_con, "raw", n = 1L)) == 0L) quit(save = "no", status = 0L)
      }
    })
    invisible()
  }

  read_int <- function() {
    n <- readBin(cmd_con, "integer", n = 1L, size = 4L, endian = "big")
    if (length(n) == 0L) quit(save = "no", status = 0L)  # the host went away
    n
  }

  receive <- function() {
    count <- read_int()
    fields <- character(count)
    for (i in seq_len(count)) {
      len <- read_int()
      bytes <- if (len > 0L) readBin(cmd_con, "raw", n = len) else raw()
      if (length(bytes) < len) quit(save = "no", status = 0L)
      s <- rawToChar(bytes)
      Encoding(s) <- "UTF-8"
      fields[i] <- s
    }
    fields
  }

  # --- formatting as R's console does ---------------------------------------

  deparse_call <- function(call) {
    lines <- deparse(call, nlines = 2L, width.cutoff = 60L)
    if (length(lines) > 1L) paste0(lines[1L], " ...") else lines
  }

  # NULL for the call top-level code was run with (R's console shows none)
  visible_call <- function(call) {
    if (is.null(call) || identical(call, eval_call)) NULL else call
  }

  # "Error in f() : boom" / "Error: boom", as R's console prints an error
  error_text <- function(cond) {
    msg <- conditionMessage(cond)
    call <- visible_call(conditionCall(cond))
    if (is.null(call)) return(paste0("Error: ", msg))
    dcall <- deparse_call(call)
    first <- strsplit(msg, "\n", fixed = TRUE)[[1L]][1L]
    sep <- if (nchar(dcall) + nchar(if (is.na(first)) "" else first) > 58L) "\n  " else " "
    paste0("Error in ", dcall, " :", sep, msg)
  }

  warning_line <- function(w) {
    msg <- conditionMessage(w)
    call <- visible_call(conditionCall(w))
    if (is.null(call)) return(paste0(msg, " "))
    dcall <- deparse_call(call)
    first <- strsplit(msg, "\n", fixed = TRUE)[[1L]][1L]
    sep <- if (nchar(dcall) + nchar(if (is.na(first)) "" else first) > 58L) "\n  " else " "
    paste0("In ", dcall, " :", sep, msg)
  }

  # what R's console prints after a top-level call that warned
  warnings_text <- function(ws, prefix = "") {
    n <- length(ws)
    if (n == 1L) {
      paste0(prefix, "Warning message:\n", warning_line(ws[[1L]]), "\n")
    } else if (n <= 10L) {
      lines <- vapply(seq_len(n), function(i) paste0(i, ": ", warning_line(ws[[i]])), "")
      paste0(prefix, "Warning messages:\n", paste0(lines, "\n", collapse = ""))
    } else if (n < 50L) {
      paste0(prefix, "There were ", n, " warnings (use warnings() to see them)\n")
    } else {
      paste0(prefix, "There were 50 or more warnings (use warnings() to see the first 50)\n")
    }
  }

  # keeps warnings() working: R's console stores a top-level call's warnings
  # as last.warning, which only R's own code may create; they are signalled
  # again outside the cell and R prints them, as deferred ones, to nowhere
  store_warnings <- function(ws) {
    sinks <- sink.number(type = "message")
    void <- file(nullfile(), "w")
    sink(void, type = "message")
    on.exit({
      if (sinks == 2L) sink(type = "message") else sink(getConnection(sinks), type = "message")
      close(void)
    })
    old <- options(warn = 0)
    on.exit(options(old), add = TRUE)
    for (w in ws[seq_len(min(length(ws), 50L))]) {
      w$call <- visible_call(conditionCall(w))
      warning(w)
    }
    .Internal(printDeferredWarnings())
  }

  html_escape <- function(x) {
    x <- gsub("&", "&amp;", x, fixed = TRUE)
    x <- gsub("<", "&lt;", x, fixed = TRUE)
    gsub(">", "&gt;", x, fixed = TRUE)
  }

  # a data.frame as a simple HTML table (the first 1000 rows)
  html_table <- function(df) {
    shown <- if (nrow(df) > 1000L) df[seq_len(1000L), , drop = FALSE] else df
    cells <- as.matrix(format(shown))
    head <- paste0("<th>", html_escape(colnames(shown)), "</th>", collapse = "")
    rows <- character(nrow(cells))
    rn <- html_escape(rownames(shown))
    for (i in seq_len(nrow(cells))) {
      rows[i] <- paste0("<tr><th>", rn[i], "</th>",
                        paste0("<td>", html_escape(cells[i, ]), "</td>", collapse = ""), "</tr>")
    }
    more <- if (nrow(df) > nrow(shown)) sprintf("<p>%d of %d rows</p>\n", nrow(shown), nrow(df)) else ""
    paste0("<table>\n<thead><tr><th></th>", head, "</tr></thead>\n<tbody>\n",
           paste0(rows, "\n", collapse = ""), "</tbody>\n</table>\n", more)
  }

  # the text R's console prints for a visible value (print, or show for S4)
  value_bundle <- function(value) {
    lines <- capture.output(if (isS4(value)) methods::show(value) else print(value))
    bundle <- c("text/plain", paste(lines, collapse = "\n"))
    if (is.data.frame(value)) {
      html <- tryCatch(html_table(value), error = function(e) NULL)
      if (!is.null(html)) bundle <- c(bundle, "text/html", html)
    }
    bundle
  }

  # --- plots ----------------------------------------------------------------

  our_devices <- integer()

  # the device base graphics and grid open when none is: a PNG file per page
  open_png <- function(...) {
    size <- function(name, default) {
      v <- getOption(name, default)
      if (is.numeric(v) && length(v) == 1L && v > 0) v else default
    }
    file <- file.path(plot_dir, sprintf("cell%06d-%03d-%%03d.png", cell_number, length(our_devices) + 1L))
    type <- if (isTRUE(capabilities("cairo"))) "cairo" else getOption("bitmapType")
    grDevices::png(file, width = size("corral.plot.width", 7), height = size("corral.plot.height", 7),
                   units = "in", res = size("corral.plot.res", 72), type = type)
    our_devices <<- c(our_devices, grDevices::dev.cur())
  }
  options(device = open_png)

  # closes the devices the cell's plots opened and sends every page drawn
  send_plots <- function() {
    current <- grDevices::dev.cur()
    for (d in our_devices) {
      if (d %in% grDevices::dev.list()) try(grDevices::dev.off(d), silent = TRUE)
    }
    our_devices <<- integer()
    if (current %in% grDevices::dev.list() && current > 1L) grDevices::dev.set(current)
    pattern <- sprintf("^cell%06d-.*[.]png$", cell_number)
    for (f in sort(list.files(plot_dir, pattern = pattern, full.names = TRUE))) send("image", f)
  }

  # --- environment ----------------------------------------------------------

  # sets name/value pairs; returns what they were (NA: unset)
  set_env <- function(pairs) {
    if (length(pairs) == 0L) return(character())
    names <- pairs[c(TRUE, FALSE)]
    values <- pairs[c(FALSE, TRUE)]
    old <- Sys.getenv(names, unset = NA, names = TRUE)
    do.call(Sys.setenv, as.list(setNames(values, names)))
    old
  }

  restore_env <- function(old) {
    for (name in names(old)) {
      if (is.na(old[[name]])) Sys.unsetenv(name) else do.call(Sys.setenv, setNames(list(old[[name]]), name))
    }
  }

  environ <- function(fields) {
    i <- 1L
    while (i + 2L <= length(fields)) {
      name <- fields[i]
      if (fields[i + 1L] == "1") do.call(Sys.setenv, setNames(list(fields[i + 2L]), name))
      else Sys.unsetenv(name)
      i <- i + 3L
    }
  }

  # --- running a cell -------------------------------------------------------

  # runs one top-level expression as R's console would; returns FALSE when it
  # stopped the cell (an error or an interrupt, already reported)
  run_expression <- function(corral..expr, is_last) {
    warns <- list()
    failure <- NULL
    on_warning <- function(w) {
      level <- getOption("warn", 0)
      if (!is.numeric(level) || length(level) != 1L || is.na(level)) level <- 0
      if (level >= 2) return()  # R turns it into an error
      if (level == 1) {
        call <- visible_call(conditionCall(w))
        head <- if (is.null(call)) "Warning: " else paste0("Warning in ", deparse_call(call), " : ")
        send("stream", "stderr", paste0(head, conditionMessage(w), "\n"))
      }
      else if (level >= 0) warns[[length(warns) + 1L]] <<- w
      invokeRestart("muffleWarning")
    }
    on_message <- function(m) {
      send("stream", "stderr", conditionMessage(m))
      invokeRestart("muffleMessage")
    }
    on_error <- function(e) {
      calls <- sys.calls()
      first <- 0L
      for (i in seq_along(calls)) if (identical(calls[[i]], eval_call)) first <- i
      calls <- calls[-seq_len(first)]
      calls <- calls[-length(calls)]  # this handler
      n <- length(calls)
      if (n > 0L && identical(calls[[n]][[1L]], quote(.handleSimpleError))) calls <- calls[-n]
      failure <<- list(cond = e, calls = calls)
    }
    outcome <- tryCatch(
      withCallingHandlers(allowInterrupts({
        shown <- withVisible(eval(corral..expr, .GlobalEnv))
        if (shown$visible) list(bundle = value_bundle(shown$value)) else list()
      }), warning = on_warning, message = on_message, error = on_error),
      interrupt = function(i) list(interrupted = TRUE),
      error = function(e) list(failed = e))
    if (!is.null(outcome$interrupted)) {
      if (length(warns)) send("stream", "stderr", warnings_text(warns))
      send("error", "KeyboardInterrupt", "", "Interrupted by the user (SIGINT)")
      return(FALSE)
    }
    if (!is.null(outcome$failed)) {
      cond <- if (!is.null(failure)) failure$cond else outcome$failed
      calls <- if (!is.null(failure)) failure$calls else list()
      text <- error_text(cond)
      if (length(calls)) {
        idx <- rev(seq_along(calls))
        text <- paste0(text, "\nTraceback:\n",
                       paste0(idx, ": ", vapply(calls[idx], deparse_call, ""), collapse = "\n"))
      }
      if (length(warns)) {
        send("stream", "stderr", warnings_text(warns, "In addition: "))
        try(store_warnings(warns), silent = TRUE)
      }
      send("error", "Error", conditionMessage(cond), text)
      return(FALSE)
    }
    if (!is.null(outcome$bundle)) send("result", if (is_last) "1" else "0", outcome$bundle)
    if (length(warns)) {
      send("stream", "stderr", warnings_text(warns))
      try(store_warnings(warns), silent = TRUE)
    }
    TRUE
  }

  # a pending interrupt meant for an earlier cell fires here, not in the cell
  drain_interrupt <- function() {
    tryCatch(allowInterrupts(Sys.sleep(0)), interrupt = function(i) NULL)
  }

  run_cell <- function(code, env_pairs) {
    cell_number <<- cell_number + 1L
    drain_interrupt()
    old_env <- set_env(env_pairs)
    on.exit(restore_env(old_env))
    exprs <- tryCatch(parse(text = code, keep.source = TRUE), error = function(e) e)
    if (inherits(exprs, "error")) {
      msg <- sub("^<text>:", "", conditionMessage(exprs))
      send("error", "SyntaxError", msg, paste0("Error: ", msg))
      return("error")
    }
    status <- "ok"
    n <- length(exprs)
    for (i in seq_len(n)) {
      if (!run_expression(exprs[[i]], i == n)) { status <- "error"; break }
    }
    send_plots()
    status
  }

  # what a first cell would load: printing, a data.frame, the PNG device
  warm <- function() {
    invisible(capture.output(print(data.frame(a = 1)), html_table(data.frame(a = 1))))
    f <- file.path(plot_dir, "warm.png")
    grDevices::png(f, type = if (isTRUE(capabilities("cairo"))) "cairo" else getOption("bitmapType"))
    graphics::plot.new()
    grDevices::dev.off()
    unlink(f)
  }

  step <- function() {
    fields <- receive()
    kind <- fields[1L]
    if (kind == "exec") {
      status <- tryCatch(run_cell(fields[2L], fields[-(1:2)]),
                         error = function(e) {
                           send("error", "Error", conditionMessage(e), paste("corral:", conditionMessage(e)))
                           "error"
                         })
      send("done", status)
    } else if (kind == "environ") {
      environ(fields[-1L])
    } else if (kind == "warm") {
      try(warm(), silent = TRUE)
      send("done", "ok")
    }
  }

  send("ready", paste(R.version$major, R.version$minor, sep = "."), tempdir())
  suspendInterrupts(repeat {
    tryCatch(step(), interrupt = function(i) NULL)
  })
})
